"""The warm pool, server side: launches whose ranks are forked from a pre-imported zygote.

One `WarmPool` per runtime (runners.runtime): on in the Streamlit server unless
PCL_WARM_POOL=0 (ui.serving), off for the CLIs unless PCL_WARM_POOL=1; when no zygote can
start, `start_ranks` raises PoolUnavailable and the launcher starts torchrun instead (for
RETRY_S). A cold launch starts torchrun's agent
and P fresh interpreters, and each imports torch (about 1.5 s on a 2-core box) and, as soon
as it builds a DDP model or an optimizer, torch._dynamo (about 2.3 s more). The pool pays
those imports once per server, in a zygote process (`runners.zygote`, which forks the ranks).

`runners.launcher` sends a launch here (`start_ranks`) inside the run `runners.run_queue`
admitted, so sharing, the queue, the concurrency limit, timeouts and cancellation are exactly
the cold path's. The guarantees of the pool itself:

    bounded      at most `max_concurrent_runs` zygotes, each serving one launch at a time; a
                 new zygote starts only for a run the run queue's admission counted it for
                 (runners.admission: its ~460 MB, spares included, before it starts)
    retired      an idle zygote goes when memory is needed for a run (admission) and when it
                 has been idle for `idle_timeout_s` (ZYGOTE_IDLE_S; the runtime's retiring
                 thread), down to the one the next click is served by
    restarted    a rank that dies is reported like under torchrun and the zygote goes on; a
                 zygote that dies (or misses a reply) is dropped and a new one is started
    no orphans   every rank and store dies with its zygote (PR_SET_PDEATHSIG); a zygote
                 exits when the server closes its pipe or dies; the runtime's `shutdown`
                 stops every zygote (at exit too)

The pool knows no experiment: the server names the modules a zygote should import ahead
(`prestart(preload=...)`, from the experiment registry).

    PCL_WARM_POOL=1 python -m bench.runs --pooled --repeats 1
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pclab.paths import IMPORT_ROOT
from pclab.runners.diagnosis import only_symptoms, rank_root_cause
from pclab.runners.environment import child_environment
from pclab.runners.memory import (
    READING_MAX_AGE_S,
    ZYGOTE_MB,
    MemoryBudget,
    descendants,
    pss_kb,
)
from pclab.runners.protocol import READY, LaunchRequest, RanksExited, RanksStarted, decode_reply
from pclab.runners.settings import Settings

START_TIMEOUT_S = 180.0  # a zygote's imports take ~4 s on a quiet 2-core box
ZYGOTE_IDLE_S = 60.0  # an idle zygote beyond the one kept warm is retired after this long
GONE_WAIT_S = 1.0  # after a zygote is killed, how long to wait for its tree's memory to go
STOP_WAIT_S = 5.0  # after killing a launch's ranks, how long to wait for the zygote's reply
RETRY_S = 300.0  # after a zygote failed to start, launches go to torchrun for this long
CODES_WAIT_S = 2.0  # how long a failed run's diagnosis waits for the ranks' exit codes
# ... when the ranks' logs hold only a peer's lost connection: the rank killed from outside
# left none, and the codes are all that can name it. Under load a surviving rank's exit after
# its Gloo error took more than 2 s (CI-like run: "rank 0: ... Connection reset by peer"
# reported for a SIGKILLed rank 1). The wait ends as soon as the codes come.
KILLED_PEER_WAIT_S = 15.0


class PoolUnavailable(Exception):
    """No zygote could be started (its reason is the message): launch with torchrun."""


class Zygote:
    """One zygote process and the reading end of its replies; `preload` names the project
    modules it imports ahead."""

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        env = child_environment()  # set before the zygote imports torch: every rank inherits it
        preload_args = [part for name in preload for part in ("--preload", name)]
        self._buffer = b""
        self.idle_since = time.monotonic()  # set again each time it is given back idle
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pclab.runners.zygote", "--serve", *preload_args],
            cwd=IMPORT_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            start_new_session=True,
        )

    def wait_ready(self) -> None:
        """Wait for its imports (up to START_TIMEOUT_S); stopped and RuntimeError if it never
        says READY (it failed, or `close` was called meanwhile)."""
        if self.readline(time.monotonic() + START_TIMEOUT_S) != READY:
            self.close()
            raise RuntimeError("the warm pool's process did not start")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, request: LaunchRequest) -> None:
        assert self.proc.stdin is not None  # opened with PIPE
        self.proc.stdin.write(request.encode())

    def readline(self, deadline: float) -> str | None:
        """The zygote's next line, or None at the deadline or once it has gone."""
        stdout = self.proc.stdout
        assert stdout is not None  # opened with PIPE
        while b"\n" not in self._buffer:
            wait = deadline - time.monotonic()
            if wait <= 0 or stdout.closed:
                return None
            ready, _, _ = select.select([stdout], [], [], min(0.1, wait))
            if ready:
                chunk = os.read(stdout.fileno(), 65536)
                if not chunk:
                    return None
                self._buffer += chunk
            elif self.proc.poll() is not None:
                return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode().strip()

    def kill(self) -> None:
        """Kill the zygote; its ranks and stores die with it (PR_SET_PDEATHSIG). Safe from
        another thread than the one reading its replies, which then sees it gone."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        """Kill the zygote, reap it and close its pipes; return once its spares and ranks
        hold no memory any more (at most GONE_WAIT_S), so a reading after it counts none."""
        tree = descendants(self.proc.pid)
        self.kill()
        self.proc.wait()
        deadline = time.monotonic() + GONE_WAIT_S
        while any(pss_kb(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.01)  # PR_SET_PDEATHSIG reaches them just after the zygote dies
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@dataclass(frozen=True)
class PoolCounts:
    """A pool's zygotes at one moment: ready and idle, ready and serving a launch, being
    started (for a launch, or by `prestart` for none in particular)."""

    idle: int
    busy: int
    starting: int
    prestarting: int


class ZygoteGone(Exception):
    """The zygote did not take a request (it died since it was last used)."""


def send_launch(zygote: Zygote, request: LaunchRequest, deadline: float) -> RanksStarted:
    """Hand `request` to `zygote` and read its answer: the pids of the ranks it forked.
    Raises ZygoteGone when it takes no request or says anything else before the deadline."""
    try:
        zygote.send(request)
    except OSError as exc:
        raise ZygoteGone from exc
    try:
        reply = decode_reply(zygote.readline(deadline) or "{}")
    except ValueError:
        raise ZygoteGone from None  # it said something else, or nothing before the deadline
    if not isinstance(reply, RanksStarted):
        raise ZygoteGone
    return reply


class WarmRanks:
    """One launch's ranks in a zygote (`started`: its reply to `send_launch`): what
    `runners.launcher` polls, stops and asks why."""

    def __init__(
        self, pool: WarmPool, zygote: Zygote, world_size: int, started: RanksStarted
    ) -> None:
        self.pool, self.zygote, self.world_size = pool, zygote, world_size
        self.codes: list[int] | None = None
        self.gone = self.released = False
        self.pids: list[int] = [*started.pids, started.store]

    def poll(self) -> int | None:
        """None while ranks run; 0 once all exited 0; else the first failing rank's code."""
        if self.codes is None:
            line = self.zygote.readline(time.monotonic() + 0.1)
            reply = decode_reply(line) if line else None
            if isinstance(reply, RanksExited):
                self.codes = list(reply.codes)
            elif not self.zygote.alive():
                self.gone = True  # and its ranks with it
                self.codes = [-signal.SIGKILL] * self.world_size
        if self.codes is None:
            return None
        return next((code for code in self.codes if code != 0), 0)

    def root_cause(self, log_dir: Path, returncode: int) -> str:
        """The failing rank and why: its logs first, else its exit code (a rank killed by a
        signal before the others, whose failures are then only symptoms)."""
        if self.gone:
            return "the warm pool's process stopped during the run; a new one is starting"
        if self.codes is None:  # a peer's lost connection can be on disk before the zygote
            wait = KILLED_PEER_WAIT_S if only_symptoms(log_dir) else CODES_WAIT_S
            self._await_exit(time.monotonic() + wait)  # says which rank was killed
        failed = sorted(
            (code > 0, rank, code) for rank, code in enumerate(self.codes or ()) if code
        )
        first = (failed[0][1], failed[0][2]) if failed else None
        return rank_root_cause(log_dir, first, "", returncode)

    def _await_exit(self, deadline: float) -> None:
        """Read the zygote's replies until it reports the ranks' exit codes, it is gone, or
        the deadline (each `poll` waits up to 0.1 s for a line)."""
        while self.codes is None and time.monotonic() < deadline:
            self.poll()

    def stop(self) -> None:
        """Kill what still runs, collect the zygote's reply, and give the zygote back (once)."""
        if self.released:
            return
        self.released = True
        if self.codes is None:
            for pid in self.pids:
                try:
                    os.killpg(pid, signal.SIGKILL)  # each leads its own session
                except OSError:
                    pass
            self._await_exit(time.monotonic() + STOP_WAIT_S)
        self.pool.release(self.zygote, healthy=self.codes is not None and self.zygote.alive())


# ---------------------------------------------------------------- the server's pool


class WarmPool:
    """A runtime's zygotes: at most `max_concurrent_runs`, each serving one launch at a time,
    counted by the runtime's memory budget."""

    def __init__(self, settings: Settings, memory: MemoryBudget) -> None:
        self.settings, self.memory = settings, memory
        self._lock = threading.Lock()  # guards everything below
        self._idle: list[Zygote] = []
        self._all: set[Zygote] = set()
        self._starting = 0  # zygotes being started right now (counted against the bound)
        self._prestarting = 0  # of those, the ones `prestart` started for no run in particular
        self._importing: set[Zygote] = set()  # of those, the ones whose process exists
        self._broken: tuple[float, str] | None = None  # when and why a zygote failed to start
        self._preload: tuple[str, ...] = ()  # project modules each new zygote imports ahead
        self._closed = False
        self.idle_timeout_s = ZYGOTE_IDLE_S
        # What the runs admitted hold in reserve (the runtime wires in the run queue's): a
        # zygote `prestart` starts then never takes memory a run was promised.
        self.reserved_by_runs: Callable[[], float] = lambda: 0.0

    def enabled(self) -> bool:
        """True when launches use the warm pool: PCL_WARM_POOL=1, or unset in the Streamlit
        server (`Settings.served`)."""
        return self.settings.warm_pool is True

    def broken(self) -> str | None:
        """Why the pool cannot serve right now (a zygote failed to start less than RETRY_S
        ago, or the pool was shut down), or None."""
        with self._lock:
            return self._broken_locked()

    def _broken_locked(self) -> str | None:
        if self._closed:
            return "the warm pool was shut down"
        if self._broken is not None and time.monotonic() - self._broken[0] < RETRY_S:
            return self._broken[1]
        return None

    def start_ranks(
        self, request: LaunchRequest, deadline: float, cancelled: Callable[[], object]
    ) -> WarmRanks | str:
        """Send one launch to an idle zygote (starting one if fewer than the limit exist).

        Returns its WarmRanks, or a one-line reason when no zygote could be had before the
        deadline or the request was cancelled. Raises PoolUnavailable when no zygote can be
        started (now, or less than RETRY_S ago): the launcher then starts torchrun instead.
        """
        while True:
            if (reason := self.broken()) is not None:
                raise PoolUnavailable(reason)
            with self._lock:
                zygote = self._idle.pop() if self._idle else None
                limit = self.settings.max_concurrent_runs
                start_one = zygote is None and len(self._all) + self._starting < limit
                if start_one:
                    self._starting += 1
            if zygote is not None and not zygote.alive():
                self.release(zygote, healthy=False)
                continue
            if zygote is None and start_one:
                try:
                    zygote = self._start()
                except (RuntimeError, OSError) as exc:
                    raise PoolUnavailable(str(exc)) from None
            if zygote is not None:
                try:
                    started = send_launch(zygote, request, deadline)
                    return WarmRanks(self, zygote, request.world_size, started)
                except ZygoteGone:
                    self.release(zygote, healthy=False)  # then take (or start) another
                    continue
            if cancelled() or time.monotonic() >= deadline:
                return "the warm pool had no free process before the deadline"
            time.sleep(0.05)  # another run is starting or using every zygote the bound allows

    def _start(self) -> Zygote:
        """A new zygote, counted in the pool and by the memory budget (the caller has
        reserved its place in `_starting`); a failure is remembered for RETRY_S (`broken`).
        `shutdown` stops one that is still importing too, and one that comes up after it is
        stopped at once."""
        zygote = None
        try:
            zygote = Zygote(self._preload)
            with self._lock:
                self._importing.add(zygote)
                closed = self._closed
            if closed:
                zygote.kill()
            zygote.wait_ready()
        except (RuntimeError, OSError) as exc:
            with self._lock:
                if not self._closed:
                    self._broken = (time.monotonic(), str(exc) or type(exc).__name__)
            raise
        finally:
            with self._lock:
                self._starting -= 1
                if zygote is not None:
                    self._importing.discard(zygote)
        with self._lock:
            if not self._closed:
                self._all.add(zygote)
                self._broken = None
                self.memory.watch(zygote.proc.pid)
                return zygote
        zygote.close()
        raise RuntimeError("the warm pool was shut down")

    def release(self, zygote: Zygote, healthy: bool) -> None:
        """Back to the idle list, or - when it died or missed a reply - replaced by a fresh
        one."""
        with self._lock:
            if healthy and zygote in self._all:
                zygote.idle_since = time.monotonic()
                self._idle.append(zygote)
                return
            self._all.discard(zygote)
            if zygote in self._idle:
                self._idle.remove(zygote)
        self._close(zygote)
        self.prestart()

    def _close(self, zygote: Zygote) -> None:
        zygote.close()
        self.memory.unwatch(zygote.proc.pid)

    def prestart(self, preload: tuple[str, ...] | None = None) -> None:
        """Start one zygote in the background when the pool is on and has none: the first run
        (or the first after a zygote died) then needs no start-up of its own. `preload` names
        the project modules every zygote started from now on imports ahead (about 20 ms a
        rank otherwise); None keeps the list it has. A zygote that would take the tree past
        its memory budget is not started: a launch then needs one, and the run queue's
        admission counts it."""
        with self._lock:
            if preload is not None:
                self._preload = tuple(preload)
            if not self.enabled() or self._all or self._starting or self._broken_locked():
                return
        held = self.memory.lab_mb(READING_MAX_AGE_S) + self.reserved_by_runs()
        if held + ZYGOTE_MB > self.memory.budget_mb:
            return
        with self._lock:
            if self._all or self._starting:
                return
            self._starting += 1
            self._prestarting += 1

        def warm() -> None:
            try:
                zygote = self._start()
            except (RuntimeError, OSError):
                return  # a launch will try again and report the reason
            finally:
                with self._lock:
                    self._prestarting -= 1
            self.release(zygote, healthy=True)

        threading.Thread(target=warm, name="pcl-warm-pool", daemon=True).start()

    def zygote_pids(self) -> set[int]:
        """The pids of the zygotes alive in this pool."""
        with self._lock:
            return {zygote.proc.pid for zygote in self._all}

    def counts(self) -> PoolCounts:
        """Its zygotes by state, read at once (what admission counts a run's zygote from)."""
        with self._lock:
            idle, ready = len(self._idle), len(self._all)
            return PoolCounts(idle, ready - idle, self._starting, self._prestarting)

    def unready_mb(self) -> float:
        """Memory a zygote `prestart` is still starting will hold once it has imported (no
        reading counts it yet, and no run reserved it)."""
        with self._lock:
            return self._prestarting * ZYGOTE_MB

    def retire_idle(self, keep: int, idle_for_s: float = 0.0) -> int:
        """Stop the idle zygotes idle for at least `idle_for_s`, beyond the `keep` most
        recently used; returns how many went (their memory is gone when it returns)."""
        now = time.monotonic()
        with self._lock:
            by_use = sorted(self._idle, key=lambda z: z.idle_since, reverse=True)
            retired = [z for z in by_use[max(0, keep) :] if now - z.idle_since >= idle_for_s]
            for zygote in retired:
                self._idle.remove(zygote)
                self._all.discard(zygote)
        for zygote in retired:
            self._close(zygote)
        return len(retired)

    def size(self) -> dict[str, int]:
        """How many zygotes exist, idle and starting (the launcher reads it for its memory
        estimate)."""
        with self._lock:
            return {"zygotes": len(self._all), "idle": len(self._idle), "starting": self._starting}

    def shutdown(self) -> None:
        """Stop every zygote (and so every rank and store they hold); start none again."""
        with self._lock:
            self._closed = True
            zygotes, importing = list(self._all), list(self._importing)
            self._all.clear()
            self._idle.clear()
        for zygote in importing:
            zygote.kill()  # its starting thread sees it gone, closes it and starts none again
        for zygote in zygotes:
            self._close(zygote)
