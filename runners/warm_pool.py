"""Opt-in warm pool: every launch's ranks forked from a Python that has already imported torch.

Off unless the server runs with PCL_WARM_POOL=1. A cold launch starts torchrun's agent and P
fresh interpreters, and each imports torch (about 1.5 s on a 2-core box) and, as soon as it
builds a DDP model or an optimizer, torch._dynamo (about 2.3 s more). The pool pays those
imports once per server:

    zygote   python -m runners.warm_pool --serve: imports torch, torch.distributed,
             torch._dynamo, DDP, FSDP ... once; starts no thread and runs no torch op, so
             forking it is safe; reads one request per line on its stdin (a pipe: nothing
             outside this machine, or outside the server process, can reach it)
    spares   before each request the zygote forks a store process, serving the rendezvous
             TCPStore on a fresh 127.0.0.1 port (torchrun's agent serves it on every
             interface), and two blank ranks waiting on a pipe: a launch pays no fork
    a launch each rank gets torchrun's environment (RANK, WORLD_SIZE, MASTER_PORT,
             TORCHELASTIC_USE_AGENT_STORE ...), runs the worker module as __main__, joins a
             real Gloo group through env://, and writes its exit code back to the zygote

`runners.launcher` sends a launch here (`start_ranks`) inside the job `runners.jobs` gave it,
so sharing, the line, the concurrency limit, timeouts and cancellation are exactly the cold
path's. The guarantees of the pool itself:

    bounded      at most jobs.MAX_CONCURRENT_RUNS zygotes, each serving one launch at a time
    restarted    a rank that dies is reported like under torchrun and the zygote goes on; a
                 zygote that dies (or misses a reply) is dropped and a new one is started
    no orphans   every rank and store dies with its zygote (PR_SET_PDEATHSIG); a zygote
                 exits when the server closes its pipe or dies; `shutdown` runs at exit

    PCL_WARM_POOL=1 python -c "from runners.launcher import launch; print(launch('bench.noop_worker', 2))"
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

ENV = "PCL_WARM_POOL"
START_TIMEOUT_S = 180.0  # a zygote's imports take ~4 s on a quiet 2-core box
STOP_WAIT_S = 5.0
SPARE_RANKS = 2  # ranks forked ahead of time: the lab's experiments run on 2 processes  # after killing a launch's ranks, how long to wait for the zygote's reply
READY = "ready"
# Third-party modules only: the project's own modules are read fresh by every rank, so an
# edited worker runs as edited (its hash is the cache key as usual).
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "torch.nn.parallel",
    "torch.distributed.nn.functional",
    "torch.distributed.elastic.multiprocessing.errors",
    "torch.distributed.fsdp",
    "torch.distributed.device_mesh",
    "safetensors.torch",
    "tokenizers",
)
PROJECT_PACKAGES = ("core", "runners", "bench", "ui", "tests")
# The lab's own runner modules are imported too (about 20 ms a rank otherwise); a rank drops
# every project module again if any of their files changed since, so edits still count.
PROJECT_PRELOAD = ("runners.negatives", "runners.clipping", "runners.transformer", "runners.lm.branches")
_PRELOADED: dict[str, tuple[str, int]] = {}  # module -> (file, mtime_ns) when the zygote loaded it


def enabled() -> bool:
    """True when the server was started with PCL_WARM_POOL=1 (or true/yes/on)."""
    return os.environ.get(ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def rank_log_dir(log_dir: Path, rank: int) -> Path:
    """Where a pooled rank's stdout.log, stderr.log and error.json go: torchrun's own layout
    (<log_dir>/<run>/attempt_0/<rank>/), so the launcher finds root causes the same way."""
    return Path(log_dir) / "pool" / "attempt_0" / str(rank)


# ---------------------------------------------------------------- zygote side


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the process that forked it dies."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _fork(body, *args) -> int:
    """Fork; the child runs `body(*args)` in its own session, dies with the zygote, and
    never returns."""
    sys.stdout.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()  # its own process group: the launcher stops it and anything it starts
        _die_with_parent()
        code = body(*args)
    except BaseException:  # noqa: BLE001 - reported through the exit code and stderr
        traceback.print_exc()
    finally:
        os._exit(code)  # never the zygote's atexit handlers or its request loop


def _detach_stdio() -> None:
    """Let go of the zygote's request and reply pipes: only the zygote may use them."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    os.close(null)


def _store_main(listener: socket.socket) -> int:
    """Serve a launch's rendezvous store on the zygote's loopback socket until killed."""
    import torch.distributed as dist

    _detach_stdio()
    host, port = listener.getsockname()
    store = dist.TCPStore(  # noqa: F841 - alive while this process is
        host, port, is_master=True, master_listen_fd=listener.fileno(), wait_for_workers=False
    )
    while True:
        signal.pause()


def _spare_store() -> tuple[int, int]:
    """A store process already serving on a fresh 127.0.0.1 port: (pid, port)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        return _fork(_store_main, listener), listener.getsockname()[1]


def _spare_main(job_r: int, code_w: int) -> int:
    """A forked child that waits for its part in a launch, plays it, and writes its exit code
    to the zygote before exiting (so the reply does not wait for the address space to go)."""
    _detach_stdio()
    message = b""
    while not message.endswith(b"\n"):
        chunk = os.read(job_r, 1 << 16)
        if not chunk:
            return 0  # the zygote retired it, or is gone
        message += chunk
    os.close(job_r)
    job = json.loads(message)
    code = 1
    try:
        code = _rank_main(job["request"], job["rank"], job["port"])
    except BaseException:  # noqa: BLE001 - the worker's crash, reported by its exit code
        traceback.print_exc()
    finally:
        os.write(code_w, f"{code}\n".encode())
    return code


def _spare_rank() -> tuple[int, int, int]:
    """A child forked in advance for some launch's rank: (pid, job pipe, exit-code pipe)."""
    job_r, job_w = os.pipe()
    code_r, code_w = os.pipe()
    pid = _fork(_spare_main, job_r, code_w)
    os.close(job_r)
    os.close(code_w)
    return pid, job_w, code_r


def _alive(pid: int) -> bool:
    """Still running (reaps it when it has died)."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


def _project_changed() -> bool:
    """Has any project file the zygote loaded been edited (or removed) since?"""
    for file, mtime_ns in _PRELOADED.values():
        try:
            if os.stat(file).st_mtime_ns != mtime_ns:
                return True
        except OSError:
            return True
    return False


def _rank_main(request: dict, rank: int, port: int) -> int:
    """Become rank `rank` of the request, as torchrun would have started it, and run the worker."""
    if _project_changed():
        for name in [n for n in sys.modules if n.split(".")[0] in PROJECT_PACKAGES]:
            del sys.modules[name]  # the worker, core and runners are read as they are now
    logs = rank_log_dir(Path(request["log_dir"]), rank)
    logs.mkdir(parents=True, exist_ok=True)
    for fd, name in ((1, "stdout.log"), (2, "stderr.log")):
        target = os.open(logs / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the zygote's stdin is the request pipe
    world = str(request["world_size"])
    os.environ.clear()
    os.environ.update(request["env"])  # the launcher's environment, as a cold launch gets it
    os.environ.update(
        {
            "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
            "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": world, "ROLE_WORLD_SIZE": world,
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",  # the store process above is the server
            "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_ERROR_FILE": str(logs / "error.json"),  # @record writes it
            "GLOO_SOCKET_IFNAME": "lo",  # Gloo's pairs on loopback only
        }
    )  # fmt: skip
    import runpy

    sys.argv = [request["worker"], *request["args"]]
    try:
        runpy.run_module(request["worker"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


class _Spares:
    """Children forked before a request arrives: one store and SPARE_RANKS ranks, so a launch
    pays no fork (about 10 ms each for a zygote of ~300 MB) before its ranks start."""

    def __init__(self) -> None:
        self.store: tuple[int, int] | None = None
        self.ranks: list[tuple[int, int, int]] = []

    def refill(self) -> None:
        if self.store is None or not _alive(self.store[0]):
            self.store = _spare_store()
        for spare in [r for r in self.ranks if not _alive(r[0])]:
            self.ranks.remove(spare)  # killed while it waited: never hand it a rank
            os.close(spare[1])
            os.close(spare[2])
        while len(self.ranks) < SPARE_RANKS:
            self.ranks.append(_spare_rank())

    def take(self, world_size: int) -> tuple[tuple[int, int], list[tuple[int, int, int]]]:
        self.refill()
        store, self.store = self.store, None
        ranks = [self.ranks.pop(0) if self.ranks else _spare_rank() for _ in range(world_size)]
        return store, ranks


def _serve_one(request: dict, parent: int, out, spares: _Spares) -> None:
    """One launch: hand the spare store and ranks their parts, reply their pids at once and
    their exit codes when every rank has ended, then fork the next spares."""
    (store, port), ranks = spares.take(request["world_size"])
    for rank, (_, job_w, _) in enumerate(ranks):
        job = (json.dumps({"request": request, "rank": rank, "port": port}) + "\n").encode()
        try:
            while job:
                job = job[os.write(job_w, job) :]
        except OSError:
            pass  # it died meanwhile: its exit status says how
        os.close(job_w)
    print(json.dumps({"pids": [pid for pid, _, _ in ranks], "store": store}), file=out, flush=True)
    codes: list[int | None] = [None] * len(ranks)
    waiting = {code_r: i for i, (_, _, code_r) in enumerate(ranks)}
    while waiting:
        ready = select.select(list(waiting), [], [], 0.5)[0]
        if os.getppid() != parent:
            os._exit(1)  # the server is gone: so are the ranks (they die with this process)
        for fd in ready:
            i, said = waiting.pop(fd), os.read(fd, 64).strip()
            os.close(fd)
            # no word: killed (or crashed below Python) - its wait status names the signal
            codes[i] = int(said) if said else os.waitstatus_to_exitcode(os.waitpid(ranks[i][0], 0)[1])
    try:
        os.kill(store, signal.SIGKILL)
    except OSError:
        pass
    print(json.dumps({"exit": codes}), file=out, flush=True)
    for pid in [store, *(pid for pid, _, _ in ranks)]:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass  # reaped above
    spares.refill()


def serve() -> None:
    """The zygote: import PRELOAD, say READY, then serve one launch per request line."""
    import importlib

    parent = os.getppid()
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional part (FSDP on an old torch): the rank imports it if it can
    for name in PROJECT_PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a broken module fails in the rank, with its traceback
            pass
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name.split(".")[0] in PROJECT_PACKAGES and file:
            _PRELOADED[name] = (file, os.stat(file).st_mtime_ns)
    import torch

    torch.set_num_threads(1)
    out = sys.stdout
    spares = _Spares()
    spares.refill()
    print(READY, file=out, flush=True)
    pending = b""
    while os.getppid() == parent:
        if b"\n" not in pending:
            if not select.select([0], [], [], 0.5)[0]:
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return  # the server closed the pipe
            pending += chunk
            continue
        line, pending = pending.split(b"\n", 1)
        _serve_one(json.loads(line), parent, out, spares)


# ---------------------------------------------------------------- server side


class Zygote:
    """One zygote process and the reading end of its replies."""

    def __init__(self) -> None:
        from runners.launcher import ROOT

        env = dict(os.environ)
        env.update(
            {
                "OMP_NUM_THREADS": "1",  # before the zygote imports torch: every rank inherits it
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
                "PYTHONUNBUFFERED": "1",
            }
        )
        self._buffer = b""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runners.warm_pool", "--serve"],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, bufsize=0, start_new_session=True,
        )  # fmt: skip
        if self.readline(time.monotonic() + START_TIMEOUT_S) != READY:
            self.close()
            raise RuntimeError("the warm pool's process did not start")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, request: dict) -> None:
        self.proc.stdin.write((json.dumps(request) + "\n").encode())

    def readline(self, deadline: float) -> str | None:
        """The zygote's next line, or None at the deadline or once it has gone."""
        while b"\n" not in self._buffer:
            wait = deadline - time.monotonic()
            if wait <= 0 or self.proc.stdout.closed:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], min(0.1, wait))
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    return None
                self._buffer += chunk
            elif self.proc.poll() is not None:
                return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode().strip()

    def close(self) -> None:
        """Stop the zygote; its ranks and stores die with it (PR_SET_PDEATHSIG)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            stream.close()


class ZygoteGone(Exception):
    """The zygote did not take a request (it died since it was last used)."""


class WarmRanks:
    """One launch's ranks in a zygote: what `runners.launcher` polls, stops and asks why."""

    def __init__(self, zygote: Zygote, request: dict, deadline: float) -> None:
        self.zygote, self.world_size = zygote, request["world_size"]
        self.codes: list[int] | None = None
        self.gone = self.released = False
        try:
            zygote.send(request)
        except OSError as exc:
            raise ZygoteGone from exc
        reply = json.loads(zygote.readline(deadline) or "{}")
        if "pids" not in reply:
            raise ZygoteGone
        self.pids: list[int] = [*reply["pids"], reply["store"]]

    def poll(self) -> int | None:
        """None while ranks run; 0 once all exited 0; else the first failing rank's code."""
        if self.codes is None:
            line = self.zygote.readline(time.monotonic() + 0.1)
            if line:
                self.codes = json.loads(line)["exit"]
            elif not self.zygote.alive():
                self.gone = True  # and its ranks with it
                self.codes = [-signal.SIGKILL] * self.world_size
        if self.codes is None:
            return None
        return next((code for code in self.codes if code != 0), 0)

    def root_cause(self, log_dir: Path, returncode: int) -> str:
        """The failing rank and why: its logs first, else its exit code (a rank killed by a
        signal before the others, whose failures are then only symptoms)."""
        from runners.launcher import rank_root_cause

        if self.gone:
            return "the warm pool's process stopped during the run; a new one is starting"
        failed = sorted((code > 0, rank, code) for rank, code in enumerate(self.codes or ()) if code)
        first = (failed[0][1], failed[0][2]) if failed else None
        return rank_root_cause(log_dir, first, "", returncode)

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
            deadline = time.monotonic() + STOP_WAIT_S
            while self.poll() is None and time.monotonic() < deadline:
                pass
        _release(self.zygote, healthy=self.codes is not None and self.zygote.alive())


# ---------------------------------------------------------------- the server's pool

_LOCK = threading.Lock()
_IDLE: list[Zygote] = []
_ALL: set[Zygote] = set()
_STARTING = [0]  # zygotes being started right now (counted against the bound)


def _limit() -> int:
    from runners import jobs

    return jobs.MAX_CONCURRENT_RUNS


def start_ranks(request: dict, deadline: float, cancelled) -> WarmRanks | str:
    """Send one launch to an idle zygote (starting one if fewer than the limit exist).
    Returns its WarmRanks, or a one-line reason when no zygote could be had before the
    deadline or the request was cancelled."""
    while True:
        with _LOCK:
            zygote = _IDLE.pop() if _IDLE else None
            start_one = zygote is None and len(_ALL) + _STARTING[0] < _limit()
            if start_one:
                _STARTING[0] += 1
        if zygote is not None and not zygote.alive():
            _release(zygote, healthy=False)
            continue
        if zygote is None and start_one:
            try:
                zygote = _start()
            except (RuntimeError, OSError) as exc:
                return f"the warm pool could not start: {exc}"
        if zygote is not None:
            try:
                return WarmRanks(zygote, request, deadline)
            except ZygoteGone:
                _release(zygote, healthy=False)  # then take (or start) another
                continue
        if cancelled() or time.monotonic() >= deadline:
            return "the warm pool had no free process before the deadline"
        time.sleep(0.05)  # another job is starting or using every zygote the bound allows


def _start() -> Zygote:
    """A new zygote, counted in _ALL (the caller has reserved its place in _STARTING)."""
    try:
        zygote = Zygote()
    finally:
        with _LOCK:
            _STARTING[0] -= 1
    with _LOCK:
        _ALL.add(zygote)
    return zygote


def _release(zygote: Zygote, healthy: bool) -> None:
    """Back to the idle list, or - when it died or missed a reply - replaced by a fresh one."""
    with _LOCK:
        if healthy and zygote in _ALL:
            _IDLE.append(zygote)
            return
        _ALL.discard(zygote)
        if zygote in _IDLE:
            _IDLE.remove(zygote)
    zygote.close()
    prestart()


def prestart() -> None:
    """Start one zygote in the background when the pool is on and has none: the first run
    after the server starts (or after a zygote died) then needs no start-up of its own."""
    with _LOCK:
        if not enabled() or _ALL or _STARTING[0]:
            return
        _STARTING[0] += 1

    def warm() -> None:
        try:
            zygote = _start()
        except (RuntimeError, OSError):
            return  # a launch will try again and report the reason
        _release(zygote, healthy=True)

    threading.Thread(target=warm, name="pcl-warm-pool", daemon=True).start()


def zygote_pids() -> set[int]:
    """The pids of the zygotes alive in this server (for tests and the benchmark)."""
    with _LOCK:
        return {zygote.proc.pid for zygote in _ALL}


def size() -> dict[str, int]:
    """How many zygotes exist, idle and starting (for tests and the benchmark)."""
    with _LOCK:
        return {"zygotes": len(_ALL), "idle": len(_IDLE), "starting": _STARTING[0]}


@atexit.register
def shutdown() -> None:
    """Stop every zygote (and so every rank and store they hold)."""
    with _LOCK:
        zygotes = list(_ALL)
        _ALL.clear()
        _IDLE.clear()
    for zygote in zygotes:
        zygote.close()


if __name__ == "__main__":
    if "--serve" in sys.argv[1:]:
        serve()
    else:
        print(__doc__)
