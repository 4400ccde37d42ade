"""Opt-in warm pool: a worker's ranks forked from a Python that has already imported torch.

Off by default, and nothing in the lab uses it unless asked. A cold launch through
`runners.launcher.launch` starts torchrun's agent and P fresh interpreters, and every one
of them imports torch (about 1.5 s on a 2-core box). Every rank that builds a DDP model or an
optimizer also imports torch._dynamo (about 2.3 s more). The pool pays those imports once:

    zygote   python -m runners.warm_pool --serve     imports torch, torch.distributed,
             torch._dynamo, DDP, FSDP ... once, starts no thread, runs no torch op
    launch   the zygote forks P ranks; each sets torchrun's environment (RANK, WORLD_SIZE,
             LOCAL_RANK, MASTER_ADDR, MASTER_PORT ...) and runs the worker module as __main__

Each rank is a real process that joins a real Gloo group through the env:// rendezvous,
exactly as under torchrun, but no torchrun agent is involved. Use it only where that
trade-off is acceptable. `Pool.launch` has `runners.launcher.launch`'s contract (a
`RunResult`, a wall-clock timeout that kills every rank, a one-line root cause).
`Pool.run(runners.negatives.run, **params)` sends one experiment's launch through the pool.

    python -c "from runners.warm_pool import Pool; p = Pool(); print(p.launch('bench.noop_worker', 2)); p.close()"
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from core.validation import InvalidInput, count, positive
from runners.launcher import (
    MAX_WORLD_SIZE,
    PG_TIMEOUT_ENV,
    ROOT,
    ProgressEvent,
    RunResult,
    payload_sha256,
    worker_code_hash,
)

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
READY = "ready"
PROJECT_PACKAGES = ("core", "runners", "bench", "ui")
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")  # a dotted module name, as the launcher checks


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the zygote dies, so no rank can outlive the pool."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------- zygote side


def _rank_main(request: dict, rank: int, log_dir: Path) -> None:
    """In a forked child: become rank `rank` and run the worker; never returns."""
    code = 1
    try:
        os.setsid()  # its own process group: the launcher can stop it and anything it starts
        _die_with_parent()
        for name in [n for n in sys.modules if n.split(".")[0] in PROJECT_PACKAGES]:
            del sys.modules[name]  # the worker, core and runners are read as they are now
        for fd, name in ((1, "stdout"), (2, "stderr")):
            target = os.open(log_dir / f"rank{rank}.{name}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the zygote's stdin is the request pipe
        world = request["world_size"]
        os.environ.update(request["env"])
        os.environ.update(
            {
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "GROUP_RANK": "0",
                "ROLE_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world),
                "ROLE_WORLD_SIZE": str(world),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(request["port"]),
                "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0",
            }
        )
        import runpy

        sys.argv = [request["worker"], *request["args"]]
        runpy.run_module(request["worker"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a rank's crash is reported, never raised further
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # never the zygote's atexit handlers or its stdin loop


def serve() -> None:
    """The zygote: import PRELOAD, say READY, then fork one job's ranks per request line."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional part (FSDP on an old torch): the rank imports it if it can
    import torch

    torch.set_num_threads(1)
    out = sys.stdout
    print(READY, file=out, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        log_dir = Path(request["log_dir"])
        pids = []
        for rank in range(request["world_size"]):
            out.flush()
            pid = os.fork()
            if pid == 0:
                _rank_main(request, rank, log_dir)
            pids.append(pid)
        print(json.dumps({"pids": pids}), file=out, flush=True)
        codes = []
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            codes.append(os.waitstatus_to_exitcode(status))
        print(json.dumps({"exit": codes}), file=out, flush=True)


# ---------------------------------------------------------------- launcher side


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pool:
    """One zygote process, started now, serving one launch at a time (others queue)."""

    def __init__(self, start_timeout_s: float = 180.0) -> None:
        env = dict(os.environ)
        env.update(
            {
                "OMP_NUM_THREADS": "1",  # before the zygote imports torch: every rank inherits it
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
                "PYTHONUNBUFFERED": "1",
            }
        )
        self._env, self._start_timeout_s = env, start_timeout_s
        self._lock = threading.RLock()  # run() holds it while its runner calls launch()
        self._proc: subprocess.Popen | None = None
        self._start()

    def _start(self) -> None:
        self._buffer = b""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "runners.warm_pool", "--serve"],
            cwd=ROOT, env=self._env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, bufsize=0, start_new_session=True,
        )  # fmt: skip
        line = self._readline(time.monotonic() + self._start_timeout_s)
        if line != READY:
            self.close()
            raise RuntimeError(f"the warm pool did not start: {line or 'no answer'}")

    def _readline(self, deadline: float) -> str | None:
        """The zygote's next line, or None at the deadline or once it has gone."""
        while b"\n" not in self._buffer:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return None
            ready, _, _ = select.select([self._proc.stdout], [], [], min(0.1, wait))
            if ready:
                chunk = os.read(self._proc.stdout.fileno(), 65536)
                if not chunk:
                    return None
                self._buffer += chunk
            elif self._proc.poll() is not None:
                return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode().strip()

    def close(self) -> None:
        """Stop the zygote; its ranks die with it (PR_SET_PDEATHSIG)."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream:
                stream.close()

    def _restart(self) -> None:
        """A fresh zygote, after a launch that stopped the last one."""
        self.close()
        self._start()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def launch(
        self,
        worker: str,
        world_size: int,
        args: Sequence[str] = (),
        *,
        timeout_s: float = 120.0,
        pg_timeout_s: float = 60.0,
        progress: Callable[[str], None] | None = None,
        cancel: threading.Event | Callable[[], object] | None = None,
    ) -> RunResult:
        """`runners.launcher.launch`, with the ranks forked from the warm zygote. `cancel` (an
        Event or a callable, polled every 0.1 s) stops the ranks: code "cancelled"."""
        if not isinstance(worker, str) or not _MODULE.match(worker):
            raise InvalidInput("worker", worker, "one_of", "a dotted module name")
        world_size = count(world_size, "world_size", minimum=1)
        if world_size > MAX_WORLD_SIZE:
            raise InvalidInput("world_size", world_size, "in_range", f"1..{MAX_WORLD_SIZE}")
        if isinstance(args, str) or any(not isinstance(a, str) for a in args):
            raise TypeError(f"args={args!r} is not a sequence of strings")
        timeout_s, pg_timeout_s = positive(timeout_s, "timeout_s"), positive(pg_timeout_s, "pg_timeout_s")
        worker_hash = worker_code_hash(worker)

        def say(event: str, text: str, **values: object) -> None:
            if progress is not None:
                progress(ProgressEvent(event, text, **values))

        start = time.monotonic()
        if not self._lock.acquire(timeout=timeout_s):
            message = f"timed out after {timeout_s:g} s waiting for other runs to finish"
            return RunResult(False, message, (), time.monotonic() - start, worker_hash, code="timeout")
        try:
            return self._launch(
                worker, world_size, list(args), start, timeout_s, pg_timeout_s, worker_hash, say, cancel
            )
        finally:
            self._lock.release()

    def _launch(
        self, worker, world_size, args, start, timeout_s, pg_timeout_s, worker_hash, say, cancel=None
    ) -> RunResult:
        tmp = Path(tempfile.mkdtemp(prefix="pcl-pool-"))
        out_dir, log_dir = tmp / "out", tmp / "logs"
        out_dir.mkdir()
        log_dir.mkdir()
        request = {
            "worker": worker,
            "world_size": world_size,
            "args": [*args, "--out-dir", str(out_dir)],
            "log_dir": str(log_dir),
            "port": _free_port(),
            "env": {PG_TIMEOUT_ENV: repr(pg_timeout_s)},
        }
        pids: list[int] = []
        deadline = start + timeout_s
        try:
            if self._proc.poll() is not None:  # stopped after a timeout (or killed): start afresh
                try:
                    self._restart()
                except RuntimeError as exc:
                    return RunResult(
                        False, str(exc), (), time.monotonic() - start, worker_hash, code="failed"
                    )
            say("start", f"starting {world_size} processes of {worker}", world_size=world_size, worker=worker)
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            pids = json.loads(self._readline(deadline) or "{}").get("pids", [])
            finished: set[int] = set()
            codes, cancelled = None, False
            while codes is None and time.monotonic() < deadline and not cancelled:
                line = self._readline(min(deadline, time.monotonic() + 0.1))
                if line:
                    codes = json.loads(line).get("exit")
                for rank in range(world_size):
                    if rank not in finished and (out_dir / f"rank{rank}.json").exists():
                        finished.add(rank)
                        say("rank_done", f"rank {rank} reported ({len(finished)}/{world_size})",
                            rank=rank, done=len(finished), world_size=world_size)  # fmt: skip
                if self._proc.poll() is not None:
                    break
                cancelled = bool(
                    cancel.is_set() if isinstance(cancel, threading.Event) else cancel and cancel()
                )
            seconds = time.monotonic() - start
            if cancelled and codes is None:
                self._stop(pids)
                self.close()  # the next launch starts a fresh zygote
                say("cancelled", "stopped on request", seconds=seconds)
                return RunResult(False, "stopped on request", (), seconds, worker_hash, code="cancelled")
            if codes is None:
                gone = self._proc.poll() is not None
                self._stop(pids)
                self.close()  # its replies for this launch are not worth waiting for; the next starts a new one
                message = (
                    "the warm pool stopped during the run"
                    if gone
                    else f"timed out after {timeout_s:g} s; stopped all {world_size} processes"
                )
                say("timeout", message, seconds=seconds, timeout_s=timeout_s)
                return RunResult(
                    False, message, (), seconds, worker_hash, code="failed" if gone else "timeout"
                )
            message = _failure(codes, log_dir) or ""
            ranks: tuple[dict, ...] = ()
            if not message:
                ranks, message = _read_ranks(out_dir, world_size)
            if message:
                say("failed", message, message=message)
                return RunResult(False, message, (), seconds, worker_hash, code="failed")
            say("finished", f"all {world_size} ranks finished in {seconds:.1f} s", seconds=seconds)
            return RunResult(True, "", ranks, seconds, worker_hash)
        finally:
            self._stop(pids)
            shutil.rmtree(tmp, ignore_errors=True)

    def _stop(self, pids: list[int]) -> None:
        """SIGKILL every rank of a launch that is still running (each leads its own group)."""
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

    def run(self, runner: Callable[..., RunResult], **params: object) -> RunResult:
        """Call an experiment's `run` (e.g. runners.negatives.run) with its launch sent here.

        Every loaded `runners` module that holds `runners.launcher.launch` under the name
        `launch` borrows `self.launch` for the duration of the call, then gets it back."""
        from runners import launcher

        original = launcher.launch
        with self._lock:  # one experiment at a time while the name is borrowed
            borrowers = [
                module
                for name, module in list(sys.modules.items())
                if name.split(".")[0] == "runners"
                and module is not launcher  # the launcher itself keeps its own launch
                and getattr(module, "launch", None) is original
            ]
            for module in borrowers:
                module.launch = self.launch
            try:
                return runner(**params)
            finally:
                for module in borrowers:
                    module.launch = original


def _failure(codes: list[int], log_dir: Path) -> str:
    """'' when every rank exited 0, else the first failing rank's last exception line."""
    failed = [(rank, code) for rank, code in enumerate(codes) if code != 0]
    if not failed:
        return ""
    described = []
    for rank, code in failed:
        try:
            lines = [
                ln for ln in (log_dir / f"rank{rank}.stderr").read_text(errors="replace").splitlines() if ln
            ]
        except OSError:
            lines = []
        exception = next((ln for ln in reversed(lines) if not ln.startswith((" ", "\t"))), "")
        secondary = any(m in exception for m in ("Connection closed", "Connection reset", "DistBackendError"))
        how = exception or (f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}")
        described.append((secondary, rank, how))
    _, rank, how = min(described)
    return " ".join(f"rank {rank}: {how}".split())[:400]


def _read_ranks(out_dir: Path, world_size: int) -> tuple[tuple[dict, ...], str]:
    ranks = []
    for rank in range(world_size):
        try:
            payload = json.loads((out_dir / f"rank{rank}.json").read_text())
        except FileNotFoundError:
            return (), f"rank {rank}: wrote no output"
        except (OSError, ValueError) as exc:
            return (), f"rank {rank}: unreadable output ({exc})"
        body = {k: v for k, v in payload.items() if k != "sha256"} if isinstance(payload, dict) else None
        if body is None or payload.get("sha256") != payload_sha256(body):
            return (), f"rank {rank}: output missing or failing its checksum"
        ranks.append(payload)
    return tuple(ranks), ""


if __name__ == "__main__":
    if "--serve" in sys.argv[1:]:
        serve()
    else:
        print(__doc__)
