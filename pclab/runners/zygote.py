"""The warm pool's zygote: a Python that has imported torch once and forks every rank from it.

Started by `runners.warm_pool` (the server side) as

    python -m pclab.runners.zygote --serve [--preload MODULE ...]

it imports PRELOAD (and the project modules named with --preload: the experiments' workers,
which the server reads from the experiment registry), calls each such module's `preload()`
if it has one (what every rank of it loads first, loaded once here), starts no thread and
runs no parallel torch op (one intra-op thread), so forking it is safe, and then reads one
request per line on its stdin (a pipe: nothing outside the server process can reach it):

    spares   a store process, serving the rendezvous TCPStore on a fresh 127.0.0.1 port
             (torchrun's agent serves it on every interface), and two blank ranks waiting on
             a pipe, forked while the zygote is idle: a launch pays no fork
    a launch each rank gets torchrun's environment (RANK, WORLD_SIZE, MASTER_PORT,
             TORCHELASTIC_USE_AGENT_STORE ...), runs the worker module as __main__, joins a
             real Gloo group through env://, and writes its exit code back to the zygote
    no orphans every rank and store dies with the zygote (PR_SET_PDEATHSIG); the zygote
             exits when the server closes its pipe or dies
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from pclab.paths import CHECKOUT, PACKAGE_DIR
from pclab.runners.protocol import (
    READY,
    LaunchRequest,
    RankAssignment,
    RanksExited,
    RanksStarted,
)

SPARE_RANKS = 2  # ranks forked ahead of time: the lab's experiments run on 2 processes
# After a rank failed, how long the others may take to end by themselves before they are
# killed (a rank blocked in a collective never does; one killed from outside is ending).
PEER_GRACE_S = 0.5
# Third-party modules only here: the project's own are read fresh when a file changed.
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
# module (or "file:<path>" for a file a preload() read) -> (file, mtime_ns) when it was loaded
_PRELOADED: dict[str, tuple[str, int]] = {}


def rank_log_dir(log_dir: Path, rank: int) -> Path:
    """Where a pooled rank's stdout.log, stderr.log and error.json go: torchrun's own layout
    (<log_dir>/<run>/attempt_0/<rank>/), so the launcher finds root causes the same way."""
    return Path(log_dir) / "pool" / "attempt_0" / str(rank)


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when `parent`, the process that forked it, dies.

    The signal is armed only from the prctl call on: a parent that died between the fork and
    then (a server shutting the zygote down while it forks the next spares) sends nothing,
    and a spare store would wait forever. So once armed, a child whose parent is already
    someone else exits at once."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _fork(body: Callable[..., int], *args: Any) -> int:
    """Fork; the child runs `body(*args)` in its own session, dies with the zygote, and
    never returns."""
    sys.stdout.flush()
    zygote = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()  # its own process group: the launcher stops it and anything it starts
        _die_with_parent(zygote)
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
    code = 1
    try:
        code = _rank_main(RankAssignment.decode(message), code_w)
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


def _job_pipes(zygote: int) -> int:
    """How many pipes the zygote holds open for writing beyond its stdout: one job pipe per
    spare rank still waiting for its part (`_serve_one` closes each once it has written it;
    an exit-code pipe is held for reading)."""
    try:
        fds = [int(fd) for fd in os.listdir(f"/proc/{zygote}/fd") if int(fd) > 2]
    except OSError:
        return 0
    count = 0
    for fd in fds:
        try:
            if not os.readlink(f"/proc/{zygote}/fd/{fd}").startswith("pipe:"):
                continue
            with open(f"/proc/{zygote}/fdinfo/{fd}") as info:
                flags = next(line for line in info if line.startswith("flags:"))
        except (OSError, StopIteration):
            continue
        if int(flags.split()[1], 8) & os.O_ACCMODE == os.O_WRONLY:
            count += 1
    return count


def waiting_spares(zygote: int) -> list[int]:
    """A running zygote's children once its spares are forked and waiting (its store and
    SPARE_RANKS ranks), read from /proc by another process (the tests, the bench); [] before.
    Counting children is not enough: as a launch is answered, its store and ranks are still
    the zygote's children while they exit, and during a launch its ranks are."""
    try:  # the zygote starts no thread: its main task's children are all of them
        with open(f"/proc/{zygote}/task/{zygote}/children") as f:
            children = [int(pid) for pid in f.read().split()]
    except OSError:  # gone
        return []
    ready = len(children) > SPARE_RANKS and _job_pipes(zygote) >= SPARE_RANKS
    return children if ready else []


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


def _torchrun_env(rank: int, world_size: int, port: int, logs: Path) -> dict[str, str]:
    """The variables torchrun would give this rank, with the store and Gloo on loopback."""
    env = {name: str(rank) for name in ("RANK", "LOCAL_RANK", "ROLE_RANK")}
    env |= {name: str(world_size) for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "ROLE_WORLD_SIZE")}
    return env | {
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",  # the zygote's store process is the server
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_ERROR_FILE": str(logs / "error.json"),  # @record writes it
        "GLOO_SOCKET_IFNAME": "lo",  # Gloo's pairs on loopback only
    }


def _rank_main(assignment: RankAssignment, code_w: int) -> int:
    """Become rank `rank` of the request, as torchrun would have started it, and run the worker."""
    if _project_changed():
        stale = [n for n, m in sys.modules.items() if n != "__main__" and _is_project_module(m)]
        for name in stale:
            del sys.modules[name]  # the worker, core and runners are read as they are now
    from pclab.runners import worker

    request, rank = assignment.request, assignment.rank
    worker.EXIT_CODE_FD[:] = [code_w]  # finish_worker's os._exit says "0" here first
    logs = rank_log_dir(Path(request.log_dir), rank)
    logs.mkdir(parents=True, exist_ok=True)
    for fd, name in ((1, "stdout.log"), (2, "stderr.log")):
        target = os.open(logs / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the zygote's stdin is the request pipe
    os.environ.clear()
    os.environ.update(request.env)  # the launcher's environment, as a cold launch gets it
    os.environ.update(_torchrun_env(rank, request.world_size, assignment.port, logs))
    import runpy
    import tempfile

    tempfile.tempdir = None  # read $TMPDIR again: the run's own folder, not the zygote's

    sys.argv = [request.worker, *request.args]
    try:
        runpy.run_module(request.worker, run_name="__main__", alter_sys=True)
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
        assert store is not None  # refill() made one
        ranks = [self.ranks.pop(0) if self.ranks else _spare_rank() for _ in range(world_size)]
        return store, ranks


def _serve_one(request: LaunchRequest, parent: int, out: TextIO, spares: _Spares) -> None:
    """One launch: hand the spare store and ranks their parts, reply their pids at once and
    their exit codes when every rank has ended (the next spares come when it is next idle)."""
    (store, port), ranks = spares.take(request.world_size)
    for rank, (_, job_w, _) in enumerate(ranks):
        job = RankAssignment(request, rank, port).encode()
        try:
            while job:
                job = job[os.write(job_w, job) :]
        except OSError:
            pass  # it died meanwhile: its exit status says how
        os.close(job_w)
    started = RanksStarted(tuple(pid for pid, _, _ in ranks), store)
    print(started.encode(), file=out, flush=True)
    codes: list[int | None] = [None] * len(ranks)
    waiting = {code_r: i for i, (_, _, code_r) in enumerate(ranks)}
    while waiting:
        ready = select.select(list(waiting), [], [], 0.5)[0]
        if os.getppid() != parent:
            os._exit(1)  # the server is gone: so are the ranks (they die with this process)
        for fd in ready:
            if fd not in waiting:
                continue  # collected with an earlier failure of this batch
            i = waiting[fd]
            _collect(fd, ranks, waiting, codes)
            if codes[i] != 0:  # as torchrun's agent does: the others would wait for it
                _end_others(ranks, waiting, codes)
    try:
        os.kill(store, signal.SIGKILL)
    except OSError:
        pass
    exited = RanksExited(tuple(code if code is not None else 1 for code in codes))
    print(exited.encode(), file=out, flush=True)
    for pid in [store, *(pid for pid, _, _ in ranks)]:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass  # reaped above


def _collect(
    fd: int, ranks: list[tuple[int, int, int]], waiting: dict[int, int], codes: list[int | None]
) -> None:
    """The exit code of the rank whose code pipe `fd` is readable: the word it wrote, or, with
    no word (killed, or crashed below Python), its wait status, which names the signal."""
    i, said = waiting.pop(fd), os.read(fd, 64).strip()
    os.close(fd)
    codes[i] = int(said) if said else os.waitstatus_to_exitcode(os.waitpid(ranks[i][0], 0)[1])


def _end_others(
    ranks: list[tuple[int, int, int]], waiting: dict[int, int], codes: list[int | None]
) -> None:
    """One rank failed: kill the ranks still running (each leads its own process group), which
    would otherwise wait for it in their rendezvous or collective until the process-group
    timeout. Each reports 0: the failure the launch names is the first rank's, not theirs.
    A rank that ends by itself within PEER_GRACE_S keeps its own code: a rank killed from
    outside (kill -9, the OOM killer) makes its peer fail at once, and the peer's word can be
    read before the killed rank's pipe closes (measured under load: the killed rank reported
    0, and the launch named the peer's lost connection instead of the SIGKILL)."""
    deadline = time.monotonic() + PEER_GRACE_S
    while waiting:
        left = max(0.0, deadline - time.monotonic())
        ready = select.select(list(waiting), [], [], left)[0]
        if not ready:
            break
        for fd in ready:
            _collect(fd, ranks, waiting, codes)
    for fd, i in waiting.items():
        try:
            os.killpg(ranks[i][0], signal.SIGKILL)
        except OSError:
            pass
        os.close(fd)
        codes[i] = 0
    waiting.clear()


def _is_project_module(module: object) -> bool:
    """Loaded from a file of this project (some extension modules report a bare relative
    name as their file: those are never the project's)."""
    file = getattr(module, "__file__", None)
    if not file or not os.path.isabs(file):
        return False
    path = Path(file).resolve()
    return any(base is not None and path.is_relative_to(base) for base in (PACKAGE_DIR, CHECKOUT))


def _warm(project_preload: tuple[str, ...]) -> None:
    """Each preloaded project module's `preload()`: its loads, done once and shared by every
    forked rank. The files it read are watched like the modules: a rank forked after one
    changed drops the project's modules, and these caches with them, and loads again."""
    for name in project_preload:
        hook = getattr(sys.modules.get(name), "preload", None)
        if hook is None:
            continue
        try:
            files = hook()
            stamps = {str(file): os.stat(file).st_mtime_ns for file in files}
        except Exception:  # noqa: BLE001 - the rank then loads, and fails, with its traceback
            continue
        for file, mtime_ns in stamps.items():
            _PRELOADED[f"file:{file}"] = (file, mtime_ns)


def serve(project_preload: tuple[str, ...] = ()) -> None:
    """The zygote: import PRELOAD and `project_preload`, say READY, then serve one launch per
    request line."""
    import importlib

    parent = os.getppid()
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional part (FSDP on an old torch): the rank imports it if it can
    for name in project_preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a broken module fails in the rank, with its traceback
            pass
    for name, module in list(sys.modules.items()):
        if name != "__main__" and _is_project_module(module):
            file = str(module.__file__)  # a project module has a file (_is_project_module)
            _PRELOADED[name] = (file, os.stat(file).st_mtime_ns)
    import gc

    import torch

    torch.set_num_threads(1)
    _warm(project_preload)  # after the line above: no torch op here ever starts a thread
    # Everything imported so far lives as long as the zygote: out of the collector's reach,
    # a rank's collections neither walk nor write to those shared pages (copy-on-write).
    gc.collect()
    gc.freeze()
    out = sys.stdout
    spares = _Spares()
    spares.refill()
    print(READY, file=out, flush=True)
    pending = b""
    while os.getppid() == parent:
        if b"\n" not in pending:
            if not select.select([0], [], [], 0.5)[0]:
                # Idle: fork the next spares now, not as the last launch ends, when they
                # would take CPU from the server drawing its result (BENCHMARKS.md, issue 35).
                spares.refill()
                continue
            chunk = os.read(0, 65536)
            if not chunk:
                return  # the server closed the pipe
            pending += chunk
            continue
        line, pending = pending.split(b"\n", 1)
        _serve_one(LaunchRequest.decode(line), parent, out, spares)


if __name__ == "__main__":
    if "--serve" in sys.argv[1:]:
        args = sys.argv[1:]
        preload = tuple(args[i + 1] for i, a in enumerate(args[:-1]) if a == "--preload")
        serve(preload)
    else:
        print(__doc__)
