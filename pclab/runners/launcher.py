"""Launch a worker on P processes and collect each rank's JSON - without ever hanging a page.

`launch` validates its arguments, then hands the run to its runtime's run queue
(`runners.runtime`: the server's one, or a fresh one for this call; `runners.run_queue`:
identical requests share one run, at most `max_concurrent_runs` hold processes, the others
wait in the queue or hear "busy", a run nobody waits for is stopped). The run's processes
come from torchrun (`runners.processes`) or, when the runtime's warm pool is on, from a
pre-imported zygote (`runners.warm_pool`); either way this module polls them against a
wall-clock timeout and always ends with no process and no temporary directory left behind. A
failed or timed-out run is a `RunResult` with a one-line message naming the failing rank and
its root cause - never an exception.

    python -c "from pclab.runners.launcher import launch; print(launch('bench.noop_worker', 2))"
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pclab.core.validation import InvalidInput, count, positive
from pclab.runners import memory, scratch
from pclab.runners.code_hash import worker_code_hash
from pclab.runners.diagnosis import one_line
from pclab.runners.environment import child_environment
from pclab.runners.processes import Torchrun
from pclab.runners.protocol import LaunchRequest, RankOutput
from pclab.runners.results import Outcome, ProgressEvent, RunResult
from pclab.runners.run_queue import Cancel, QueuedRun
from pclab.runners.runtime import Runtime, given_or_fresh
from pclab.runners.settings import LIMITS
from pclab.runners.warm_pool import PoolUnavailable, WarmRanks
from pclab.runners.worker import PG_TIMEOUT_ENV, TOKEN_ENV


class Processes(Protocol):
    """A launch's running ranks, from torchrun (processes.Torchrun) or the warm pool
    (warm_pool.WarmRanks): polled, stopped, and asked why they failed."""

    def poll(self) -> int | None: ...

    def stop(self) -> None: ...

    def root_cause(self, log_dir: Path, returncode: int) -> str: ...


MAX_WORLD_SIZE = 64
MAX_TIMEOUT_S = 3600.0  # no request may hold processes for more than an hour
MAX_ARGS, MAX_ARG_CHARS = 256, 4096  # far beyond any worker's needs; keeps argv sane
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")


def launch(
    worker: str,
    world_size: int,
    args: Sequence[str] = (),
    *,
    timeout_s: float = 120.0,
    pg_timeout_s: float | None = None,
    progress: Callable[[ProgressEvent], None] | None = None,
    cancel: Cancel = None,
    runtime: Runtime | None = None,
) -> RunResult:
    """Run `worker` on `world_size` local processes under torchrun and gather their JSON.

    Args:
        worker: module path of a torchrun entry point, e.g. "pclab.experiments.negatives".
        world_size: number of processes P (1..64).
        args: extra worker arguments (at most 256 strings); "--out-dir <tmp>" is appended.
        timeout_s: wall-clock limit of the whole launch, time in line included (at most
            3600 s); on expiry every process is killed.
        pg_timeout_s: process-group timeout the workers pass to init_process_group
            (default: the runtime's `pg_timeout_s` setting, PCL_PG_TIMEOUT_S).
        progress: called with a `ProgressEvent` (a str) as the run advances, in this thread;
            if it raises, the run is stopped (unless an identical request still waits for it)
            and the exception propagates after the cleanup.
        cancel: a threading.Event or a zero-argument callable, polled every 0.1 s; when it
            fires this request ends with Outcome.CANCELLED (a raising one: see `run_queue.Cancel`).
        runtime: whose run queue, pool and memory budget the run uses (the server's); None:
            a fresh one from the PCL_* settings, shut down when this call returns.
    Returns:
        RunResult: ok with every rank's JSON ordered by rank, or ok=False with a message.
    Raises:
        ValueError / TypeError only for invalid arguments (never for a failed run).
    """
    world_size, args = _checked(worker, world_size, args)
    timeout_s = _seconds(timeout_s, "timeout_s")
    if pg_timeout_s is not None:
        pg_timeout_s = _seconds(pg_timeout_s, "pg_timeout_s", LIMITS["pg_timeout_s"][0])
    worker_hash = worker_code_hash(worker)
    with given_or_fresh(runtime) as used:
        pg_timeout = used.settings.pg_timeout_s if pg_timeout_s is None else pg_timeout_s

        def work(run: QueuedRun) -> RunResult:
            return _launch(used, run, worker, world_size, args, pg_timeout, worker_hash)

        warm = used.pool.enabled() and used.pool.broken() is None
        return used.run_queue.submit(
            (worker, world_size, args, worker_hash),
            work,
            timeout_s=timeout_s,
            worker_hash=worker_hash,
            progress=progress,
            cancel=cancel,
            memory_mb=memory.launch_estimate_mb(world_size, warm),
            zygote=warm,  # admission counts a new zygote when no idle one is left for it
        )


def _checked(worker: str, world_size: int, args: Sequence[str]) -> tuple[int, tuple[str, ...]]:
    """The world size and the arguments as a tuple, or InvalidInput / TypeError naming the
    bad one."""
    if not isinstance(worker, str) or not _MODULE.match(worker):
        raise InvalidInput("worker", worker, "one_of", "a dotted module name")
    world_size = count(world_size, "world_size", minimum=1)
    if world_size > MAX_WORLD_SIZE:
        raise InvalidInput("world_size", world_size, "in_range", f"1..{MAX_WORLD_SIZE}")
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise TypeError(f"args={args!r} is not a sequence of strings")
    if any(not isinstance(a, str) for a in args):
        raise TypeError(f"args={args!r} is not a sequence of strings")
    args = tuple(args)
    if len(args) > MAX_ARGS or any(len(a) > MAX_ARG_CHARS or "\0" in a for a in args):
        detail = f"at most {MAX_ARGS} strings of at most {MAX_ARG_CHARS} characters, no NUL"
        raise InvalidInput("args", args, "in_range", detail)
    return world_size, args


def _seconds(value: object, field: str, least: float = 0.0) -> float:
    """A timeout in (0, MAX_TIMEOUT_S], at least `least` (the process group's: a second)."""
    seconds = positive(value, field)
    if not least <= seconds <= MAX_TIMEOUT_S:
        low = f"{least:g} <=" if least else "0 <"
        raise InvalidInput(field, value, "in_range", f"{low} {field} <= {MAX_TIMEOUT_S:g}")
    return seconds


def _launch(
    runtime: Runtime,
    run: QueuedRun,
    worker: str,
    world_size: int,
    args: tuple[str, ...],
    pg_timeout_s: float,
    worker_hash: str,
) -> RunResult:
    """One run's processes, in its `runners.run_queue.QueuedRun` thread: start them (warm pool
    or torchrun), watch them, say how they ended, and always clean up. `run.say` reaches every
    requester."""
    ending = _Ending(runtime, run, worker, world_size, worker_hash)
    if run.cancelled():  # everyone left before it began
        return ending.ended(Outcome.CANCELLED, "stopped on request before it started")
    tmp = scratch.folder("run")  # removed below, or at exit, or by the next start (SIGKILL)
    out_dir, log_dir, rank_tmp = tmp / "out", tmp / "logs", tmp / "tmp"
    for made in (out_dir, log_dir, rank_tmp):
        made.mkdir()
    token = uuid.uuid4().hex
    # The ranks' own temporary files (a trainer's output folder) go inside the run's folder:
    # a rank killed before its clean-up (Cancel, a closed tab) leaves nothing elsewhere.
    extra = {PG_TIMEOUT_ENV: repr(pg_timeout_s), TOKEN_ENV: token, "TMPDIR": str(rank_tmp)}
    env = child_environment(extra)
    argv = [*args, "--out-dir", str(out_dir)]
    procs = None
    try:
        started = _start(ending, argv, log_dir, env)
        if isinstance(started, RunResult):
            return started
        procs = started or Torchrun(worker, world_size, argv, tmp, env, token, runtime.memory)
        ended, finished = _watch(procs, run, out_dir, world_size)
        if isinstance(ended, Outcome):  # cancelled or timed out
            procs.stop()
            return ending.stopped(ended, finished)
        if ended != 0:
            return ending.failed(procs.root_cause(log_dir, ended))
        ranks, message = _read_ranks(out_dir, world_size)
        return ending.failed(message) if message else ending.finished(ranks)
    finally:
        # Also runs on any error in this thread; a requester that leaves cancels the run above.
        if procs is not None:
            procs.stop()
        scratch.remove(tmp)


@dataclass(frozen=True)
class _Ending:
    """How one run's launch ends, said to every requester and returned as a RunResult."""

    runtime: Runtime
    run: QueuedRun
    worker: str
    world_size: int
    worker_hash: str

    def seconds(self) -> float:
        return time.monotonic() - self.run.start

    def ended(self, outcome: Outcome, message: str) -> RunResult:
        return RunResult.ended(outcome, message, self.seconds(), self.worker_hash)

    def failed(self, message: str) -> RunResult:
        self.run.say("failed", message, message=message)
        return self.ended(Outcome.FAILED, message)

    def finished(self, ranks: tuple[dict[str, Any], ...]) -> RunResult:
        seconds, world_size = self.seconds(), self.world_size
        text = f"all {world_size} ranks finished in {seconds:.1f} s"
        self.run.say("finished", text, seconds=seconds)
        return RunResult.finished(ranks, seconds, self.worker_hash)

    def stopped(self, outcome: Outcome, finished: set[int]) -> RunResult:
        """Cancelled (every requester left) or timed out; the processes are already stopped."""
        world_size, timeout_s = self.world_size, self.run.timeout_s
        if outcome is Outcome.CANCELLED:
            message = f"stopped on request; all {world_size} processes were ended"
            self.run.say("cancelled", message, seconds=self.seconds())
            return self.ended(Outcome.CANCELLED, message)
        missing = [str(r) for r in range(world_size) if r not in finished]
        which = f"rank{'s' if len(missing) > 1 else ''} {', '.join(missing)} unfinished"
        message = f"timed out after {timeout_s:g} s ({which}); stopped all {world_size} processes"
        self.run.say("timeout", message, seconds=self.seconds(), timeout_s=timeout_s)
        return self.ended(Outcome.TIMEOUT, message)


def _start(
    ending: _Ending, argv: list[str], log_dir: Path, env: dict[str, str]
) -> WarmRanks | RunResult | None:
    """The ranks from the warm pool when it is on; None to start torchrun instead (the pool
    is off, or unavailable: said as a "pool_fallback" event); a RunResult when no zygote
    came free before the deadline or every requester left."""
    run, worker, world_size = ending.run, ending.worker, ending.world_size
    pool = ending.runtime.pool
    warm = pool.enabled()
    how = " from the warm pool" if warm else " under torchrun"
    run.say(
        "start",
        f"starting {world_size} processes of {worker}{how}",
        world_size=world_size,
        worker=worker,
        path="pool" if warm else "torchrun",
    )
    if not warm:
        return None
    request = LaunchRequest(worker, world_size, tuple(argv), str(log_dir), env)
    try:
        started = pool.start_ranks(request, run.start + run.timeout_s, run.cancelled)
    except PoolUnavailable as exc:  # the cold path still works: use it
        text = f"the warm pool is unavailable ({exc}); starting torchrun instead"
        run.say("pool_fallback", text, reason=str(exc))
        return None
    if isinstance(started, str):  # no free zygote before the deadline, or cancelled
        if run.cancelled():
            return ending.ended(Outcome.CANCELLED, "stopped on request before it started")
        return ending.failed(started)
    return started


def _watch(
    procs: Processes, run: QueuedRun, out_dir: Path, world_size: int
) -> tuple[int | Outcome, set[int]]:
    """Poll until the processes exit (their exit code), every requester left
    (Outcome.CANCELLED) or time ran out (Outcome.TIMEOUT); report each rank as its output
    appears. Returns that and the ranks that reported."""
    finished: set[int] = set()
    while True:
        returncode = procs.poll()
        for rank in range(world_size):
            if rank not in finished and (out_dir / f"rank{rank}.json").exists():
                finished.add(rank)
                done = len(finished)
                text = f"rank {rank} reported ({done}/{world_size})"
                run.say("rank_done", text, rank=rank, done=done, world_size=world_size)
        if returncode is not None:
            return returncode, finished
        if run.cancelled():  # every requester left: Stop, rerun, closed tab
            return Outcome.CANCELLED, finished
        if time.monotonic() - run.start >= run.timeout_s:
            return Outcome.TIMEOUT, finished


def _read_ranks(out_dir: Path, world_size: int) -> tuple[tuple[dict[str, Any], ...], str]:
    """Every rank's signed payload, by rank; or () and the first problem, in one line."""
    ranks = []
    for rank in range(world_size):
        try:
            text = (out_dir / f"rank{rank}.json").read_text()
        except FileNotFoundError:
            return (), f"rank {rank}: wrote no output"
        except OSError as exc:
            return (), one_line(f"rank {rank}: unreadable output ({exc})")
        try:
            ranks.append(RankOutput.decode(text, rank).payload)
        except ValueError as exc:
            return (), one_line(str(exc))
    return tuple(ranks), ""
