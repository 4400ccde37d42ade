"""Launch a worker under `torchrun` and collect each rank's JSON - without ever hanging a page.

The launcher side (`launch`) runs, as an argument list and never through a shell,

    python -m torch.distributed.run --standalone --nproc-per-node P ... -m <worker> *args --out-dir <tmp>

in a new session, polls it against a wall-clock timeout, and always ends with no process and
no temporary directory left behind. A failed or timed-out run is a `RunResult` with a
one-line message naming the failing rank and its root cause - never an exception.
Every launch goes through `runners.jobs`: identical requests share one run, at most
PCL_MAX_CONCURRENT_RUNS jobs hold processes at once, the others wait in line (or hear
"busy" when the line is full), and a run nobody waits for any more is stopped.

The worker side (`init_worker`, `write_rank_output`) is what a torchrun entry point calls:
Gloo on CPU (NCCL when CUDA is present), float64 by default, a process-group timeout, and
one `rank<RANK>.json` per rank. Workers know nothing about this launcher beyond those two
calls, so they run unchanged under a hand-typed `torchrun` with more ranks or more nodes.

Run a worker by hand:  torchrun --standalone --nproc-per-node 2 -m runners.negatives --out-dir /tmp/o
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from core.validation import InvalidInput, count, positive

ROOT = Path(__file__).resolve().parent.parent
MAX_WORLD_SIZE = 64
MAX_TIMEOUT_S = 3600.0  # no request may hold processes for more than an hour
MAX_ARGS, MAX_ARG_CHARS = 256, 4096  # far beyond any worker's needs; keeps argv sane
PG_TIMEOUT_ENV = "PCL_PG_TIMEOUT_S"  # the process-group timeout handed to every worker
TOKEN_ENV = "PCL_LAUNCH_TOKEN"  # marks every process of one launch, so none can escape the sweep
GRACE_S = 3.0  # between SIGTERM and SIGKILL when a run is stopped
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")
_MAX_MESSAGE = 400
_SOURCE_LOCATION = re.compile(r"\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\]\s*")  # "[/__w/.../pair.cc:553] "
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank\d+\]:\s?")
_FATAL = ("terminate called", "what():", "Fatal Python error", "Segmentation fault")
# Symptoms of a peer having died first; these ranks are never reported as the root cause.
_SECONDARY = (
    "Connection closed by peer",
    "remote worker crashing",
    "Connection reset by peer",
    "Broken pipe",
    "DistNetworkError",
    "DistBackendError",
)


@dataclass(frozen=True)
class RunResult:
    """Outcome of one launch. `ok=False` carries a one-line `message`; `ranks` is then empty.

    `code` says why a run did not finish: "failed" (a rank's root cause), "timeout",
    "cancelled" (stopped on request), "busy" (the line was full: nothing was launched);
    "" for a finished run.
    """

    ok: bool
    message: str
    ranks: tuple[dict, ...]
    seconds: float
    worker_hash: str
    report: dict | None = None
    code: str = ""


class ProgressEvent(str):
    """A progress line (plain English text) that also carries a stable `event` code and its
    `values`, so a page can show it in the reader's language from its catalogue.

    Events: start (world_size, worker), queued (position, running), shared, busy (waiting),
    rank_done (rank, done, world_size), finished (seconds), failed (message),
    timeout (seconds, timeout_s), cancelled (seconds).
    """

    event: str
    values: dict

    def __new__(cls, event: str, text: str, **values: object) -> ProgressEvent:
        self = super().__new__(cls, text)
        self.event = event
        self.values = values
        return self


# ---------------------------------------------------------------- launcher side


def worker_code_hash(worker: str) -> str:
    """sha256 (hex) of the worker module's source file: the cache key for its results."""
    return hashlib.sha256(_worker_file(worker).read_bytes()).hexdigest()


def launch(
    worker: str,
    world_size: int,
    args: Sequence[str] = (),
    *,
    timeout_s: float = 120.0,
    pg_timeout_s: float = 60.0,
    progress: Callable[[str], None] | None = None,
    cancel: threading.Event | Callable[[], object] | None = None,
) -> RunResult:
    """Run `worker` on `world_size` local processes under torchrun and gather their JSON.

    Args:
        worker: module path of a torchrun entry point, e.g. "runners.negatives".
        world_size: number of processes P (1..64).
        args: extra worker arguments (at most 256 strings); "--out-dir <tmp>" is appended.
        timeout_s: wall-clock limit of the whole launch, time in line included (at most
            3600 s); on expiry every process is killed.
        pg_timeout_s: process-group timeout the workers pass to init_process_group.
        progress: called with a `ProgressEvent` (a str) as the run advances, in this thread;
            if it raises, the run is stopped (unless an identical request still waits for it)
            and the exception propagates after the cleanup.
        cancel: a threading.Event or a zero-argument callable, polled every 0.1 s; when it
            fires this request ends with code "cancelled". Default: `jobs.cancel_when`'s.
    Returns:
        RunResult: ok with every rank's JSON ordered by rank, or ok=False with a message.
    Raises:
        ValueError / TypeError only for invalid arguments (never for a failed run).
    """
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
    timeout_s = _seconds(timeout_s, "timeout_s")
    pg_timeout_s = _seconds(pg_timeout_s, "pg_timeout_s")
    worker_hash = worker_code_hash(worker)
    from runners import jobs  # imports this module: loaded on first use

    def work(job: jobs.Job) -> RunResult:
        return _launch(job, worker, world_size, args, pg_timeout_s, worker_hash)

    key = (worker, world_size, args, worker_hash)
    return jobs.submit(
        key, work, timeout_s=timeout_s, worker_hash=worker_hash, progress=progress, cancel=cancel
    )


def _seconds(value: object, field: str) -> float:
    seconds = positive(value, field)
    if seconds > MAX_TIMEOUT_S:
        raise InvalidInput(field, value, "in_range", f"0 < {field} <= {MAX_TIMEOUT_S:g}")
    return seconds


def _launch(job, worker, world_size, args, pg_timeout_s, worker_hash) -> RunResult:
    """One job's processes, run in its `runners.jobs.Job` thread; `job.say` reaches every
    requester. The ranks come from torchrun, or from the warm pool when PCL_WARM_POOL=1."""
    from runners import warm_pool  # imports this module: loaded on first use

    start, timeout_s, say = job.start, job.timeout_s, job.say
    if job.cancelled():  # everyone left before it began
        return RunResult(
            False, "stopped on request before it started", (), 0.0, worker_hash, code="cancelled"
        )
    tmp = Path(tempfile.mkdtemp(prefix="pcl-run-"))
    out_dir, log_dir = tmp / "out", tmp / "logs"
    out_dir.mkdir()
    log_dir.mkdir()
    token = uuid.uuid4().hex
    env = dict(os.environ)
    env.update(
        {
            "OMP_NUM_THREADS": "1",  # P processes share a small CPU; threads would fight
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
            "PYTHONUNBUFFERED": "1",
            PG_TIMEOUT_ENV: repr(pg_timeout_s),
            TOKEN_ENV: token,
        }
    )
    argv = [*args, "--out-dir", str(out_dir)]
    procs = None
    try:
        say("start", f"starting {world_size} processes of {worker}", world_size=world_size, worker=worker)
        if warm_pool.enabled():
            request = {
                "worker": worker,
                "world_size": world_size,
                "args": argv,
                "log_dir": str(log_dir),
                "env": env,
            }
            started = warm_pool.start_ranks(request, start + timeout_s, job.cancelled)
            if isinstance(started, str):  # no zygote: say why, as a failed run
                say("failed", started, message=started)
                return RunResult(False, started, (), time.monotonic() - start, worker_hash, code="failed")
            procs = started
        else:
            procs = _Torchrun(worker, world_size, argv, tmp, env, token)
        finished: set[int] = set()
        timed_out = cancelled = False
        while True:
            returncode = procs.poll()
            for rank in range(world_size):
                if rank not in finished and (out_dir / f"rank{rank}.json").exists():
                    finished.add(rank)
                    say(
                        "rank_done",
                        f"rank {rank} reported ({len(finished)}/{world_size})",
                        rank=rank, done=len(finished), world_size=world_size,
                    )  # fmt: skip
            if returncode is not None:
                break
            if job.cancelled():  # every requester left: Stop, rerun, closed tab
                cancelled = True
                break
            if time.monotonic() - start >= timeout_s:
                timed_out = True
                break
        if cancelled:
            procs.stop()
            seconds = time.monotonic() - start
            message = f"stopped on request; all {world_size} processes were ended"
            say("cancelled", message, seconds=seconds)
            return RunResult(False, message, (), seconds, worker_hash, code="cancelled")
        if timed_out:
            procs.stop()
            missing = [str(r) for r in range(world_size) if r not in finished]
            which = f"rank{'s' if len(missing) > 1 else ''} {', '.join(missing)} unfinished"
            message = f"timed out after {timeout_s:g} s ({which}); stopped all {world_size} processes"
            seconds = time.monotonic() - start
            say("timeout", message, seconds=seconds, timeout_s=timeout_s)
            return RunResult(False, message, (), seconds, worker_hash, code="timeout")
        if returncode != 0:
            message = procs.root_cause(log_dir, returncode)
        else:
            ranks, message = _read_ranks(out_dir, world_size)
            if not message:
                seconds = time.monotonic() - start
                say("finished", f"all {world_size} ranks finished in {seconds:.1f} s", seconds=seconds)
                return RunResult(True, "", ranks, seconds, worker_hash)
        seconds = time.monotonic() - start
        say("failed", message, message=message)
        return RunResult(False, message, (), seconds, worker_hash, code="failed")
    finally:
        # Also runs on any error in this thread; a requester that leaves cancels the job above.
        if procs is not None:
            procs.stop()
        shutil.rmtree(tmp, ignore_errors=True)


class _Torchrun:
    """One `torchrun --standalone` job in its own session: polled, stopped, asked why."""

    def __init__(self, worker: str, world_size: int, argv: list[str], tmp: Path, env: dict, token: str):
        cmd = [
            sys.executable, "-m", "torch.distributed.run",
            "--standalone", "--nproc-per-node", str(world_size),
            "--max-restarts", "0", "--monitor-interval", "0.1",
            "--shutdown-timeout", str(int(GRACE_S)),
            "--log-dir", str(tmp / "logs"), "--redirects", "3",  # per-rank stdout/stderr: root causes
            "-m", worker, *argv,
        ]  # fmt: skip
        self.token, self.err = token, tmp / "torchrun.err"
        with (tmp / "torchrun.out").open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True,  # its own process group: one killpg reaches it all
            )  # fmt: skip

    def poll(self) -> int | None:
        """torchrun's exit code, or None while it runs (waits up to 0.1 s)."""
        try:
            return self.proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        _stop(self.proc, self.token)

    def root_cause(self, log_dir: Path, returncode: int) -> str:
        """The failing rank and why, from its logs or torchrun's failure summary on stderr."""
        try:
            summary = self.err.read_text(errors="replace")
        except OSError:
            summary = ""
        return rank_root_cause(log_dir, _summary_failure(summary), summary, returncode)


def _summary_failure(err: str) -> tuple[int, int] | None:
    """(rank, exit code) from torchrun's "Root Cause (first observed failure)" section."""
    summary = err[err.rfind("Root Cause") :] if "Root Cause" in err else err
    rank = re.search(r"rank\s*:\s*(\d+)", summary)
    code = re.search(r"exitcode\s*:\s*(-?\d+)", summary)
    return (int(rank.group(1)), int(code.group(1))) if rank and code else None


def _worker_file(worker: str) -> Path:
    if not isinstance(worker, str) or not _MODULE.match(worker):
        raise InvalidInput("worker", worker, "one_of", "a dotted module name")
    base = ROOT.joinpath(*worker.split("."))
    for path in (base.with_suffix(".py"), base / "__main__.py", base / "__init__.py"):
        if path.is_file():
            return path
    try:
        spec = importlib.util.find_spec(worker)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        raise InvalidInput("worker", worker, "one_of", "an importable module with a source file")
    return Path(spec.origin)


def _tagged_pids(token: str) -> list[int]:
    """Live processes whose environment carries this launch's token (Linux /proc)."""
    needle = f"{TOKEN_ENV}={token}".encode()
    found = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue  # gone, or not ours
    return found


def _signal_all(proc: subprocess.Popen, token: str, sig: int) -> None:
    for pid in _tagged_pids(token):
        for kill in (os.killpg, os.kill):  # workers lead their own groups (torchrun's choice)
            try:
                kill(pid, sig)
            except OSError:
                pass
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass


def _stop(proc: subprocess.Popen, token: str) -> None:
    """Stop torchrun and every worker of this launch: SIGTERM, a grace period, SIGKILL; reap."""
    if proc.poll() is None or _tagged_pids(token):
        _signal_all(proc, token, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and (proc.poll() is None or _tagged_pids(token)):
            time.sleep(0.05)
        _signal_all(proc, token, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + GRACE_S
    while _tagged_pids(token) and time.monotonic() < deadline:
        _signal_all(proc, token, signal.SIGKILL)
        time.sleep(0.05)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_MESSAGE else line[: _MAX_MESSAGE - 1] + "…"


def _exception_line(stderr: str) -> str:
    """The 'Type: message' line that ends the last Python traceback in `stderr`, or ''."""
    # torchrun prefixes every line a worker prints with "[rank<N>]: ".
    stderr = "\n".join(_RANK_PREFIX.sub("", line) for line in stderr.splitlines())
    at = stderr.rfind("Traceback (most recent call last):")
    if at < 0:  # a crash below Python (a C++ abort, a fatal signal) leaves no traceback
        fatal = [ln.strip() for ln in stderr.splitlines() if ln.strip().startswith(_FATAL)]
        return " ".join(fatal[:2])
    lines = [ln for ln in stderr[at:].splitlines()[1:] if ln.strip()]
    tail = [ln for ln in lines if not ln.startswith((" ", "\t"))]
    return tail[0] if tail else ""


def _is_secondary(text: str) -> bool:
    """A rank that failed only because a peer died first (its collective lost the peer)."""
    return any(marker in text for marker in _SECONDARY)


def rank_root_cause(log_dir: Path, first: tuple[int, int] | None, summary: str, returncode: int) -> str:
    """The earliest failing rank and its exception, from the per-rank error files under
    `log_dir` (<run>/attempt_*/<rank>/), else `first` = (rank, exit code), else `summary`."""
    failures: list[tuple[bool, int, int, str]] = []  # (secondary, time_ns, rank, text)
    for rank_dir in log_dir.glob("*/attempt_*/*"):
        if not rank_dir.name.isdigit():
            continue
        rank, text, when = int(rank_dir.name), "", 0
        error_file = rank_dir / "error.json"  # written by torch's @record
        if error_file.is_file():
            try:
                message = json.loads(error_file.read_text()).get("message", "")
                text = message.get("message", "") if isinstance(message, dict) else str(message)
                when = error_file.stat().st_mtime_ns
            except (OSError, ValueError, AttributeError):
                text = ""
        stderr_file = rank_dir / "stderr.log"
        if not text and stderr_file.is_file():
            text = _exception_line(stderr_file.read_text(errors="replace"))
            when = stderr_file.stat().st_mtime_ns
        if text:
            failures.append((_is_secondary(text), when, rank, text))
    primary = [f for f in failures if not f[0]]
    # A rank killed from outside (kill -9, the OOM killer) leaves no traceback: its peers'
    # lost-connection errors are only symptoms, and the exit code names the signal.
    if not primary and first is not None and first[1] < 0:
        return _one_line(f"rank {first[0]}: killed by {_signal_name(-first[1])}")
    if failures:
        _, _, failed_rank, text = min(failures)
        return _one_line(f"rank {failed_rank}: {_SOURCE_LOCATION.sub('', text)}")
    if first is not None:
        how = f"killed by {_signal_name(-first[1])}" if first[1] < 0 else f"exit code {first[1]}"
        return _one_line(f"rank {first[0]}: {how}")
    last = _exception_line(summary) or next((ln for ln in reversed(summary.splitlines()) if ln.strip()), "")
    return _one_line(f"torchrun exited with code {returncode}" + (f": {last}" if last else ""))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _read_ranks(out_dir: Path, world_size: int) -> tuple[tuple[dict, ...], str]:
    ranks = []
    for rank in range(world_size):
        path = out_dir / f"rank{rank}.json"
        try:
            payload = json.loads(path.read_text())
        except FileNotFoundError:
            return (), f"rank {rank}: wrote no output"
        except (OSError, ValueError) as exc:
            return (), _one_line(f"rank {rank}: unreadable output ({exc})")
        if not isinstance(payload, dict):
            return (), f"rank {rank}: output is not a JSON object"
        body = {k: v for k, v in payload.items() if k != "sha256"}
        if payload.get("sha256") != payload_sha256(body):
            return (), f"rank {rank}: output checksum mismatch"
        ranks.append(payload)
    return tuple(ranks), ""


# ---------------------------------------------------------------- worker side


def payload_sha256(payload: dict) -> str:
    """sha256 of a payload's canonical JSON (sorted keys, no spaces): what a rank signs."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def init_worker(pg_timeout_s: float | None = None) -> tuple[int, int]:
    """Join the process group torchrun set up; returns (rank, world_size).

    Gloo on CPU, NCCL (one device per local rank) when CUDA is present; float64 by default.
    `pg_timeout_s` defaults to the launcher's PCL_PG_TIMEOUT_S, else 60 s.
    """
    import torch
    import torch.distributed as dist

    if pg_timeout_s is None:
        pg_timeout_s = float(os.environ.get(PG_TIMEOUT_ENV, "60"))
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    backend = "gloo"
    if torch.cuda.is_available():
        backend = "nccl"
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=pg_timeout_s))
    return dist.get_rank(), dist.get_world_size()


def worker_device():
    """The torch device this rank computes on: its local CUDA device, else the CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def write_rank_output(out_dir: str | os.PathLike, rank: int, payload: dict) -> None:
    """Write `<out_dir>/rank<rank>.json` atomically, with a "sha256" of the payload added."""
    body = {k: v for k, v in payload.items() if k != "sha256"}
    data = dict(body, sha256=payload_sha256(body))
    path = Path(out_dir) / f"rank{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(data, sort_keys=True))
    os.replace(partial, path)  # the launcher never sees a half-written file
