"""Why a run failed, in one line: the earliest failing rank and its exception.

Reads what torchrun (or the warm pool, which writes the same layout) leaves per rank under
`<log_dir>/<run>/attempt_*/<rank>/`: `error.json` from torch's `@record`, else the last
traceback in `stderr.log`. A rank that failed only because a peer died first is a symptom,
never the root cause; a rank killed from outside is named with its signal.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

MAX_MESSAGE = 400
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


def summary_failure(err: str) -> tuple[int, int] | None:
    """(rank, exit code) from torchrun's "Root Cause (first observed failure)" section."""
    summary = err[err.rfind("Root Cause") :] if "Root Cause" in err else err
    rank = re.search(r"rank\s*:\s*(\d+)", summary)
    code = re.search(r"exitcode\s*:\s*(-?\d+)", summary)
    return (int(rank.group(1)), int(code.group(1))) if rank and code else None


def one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


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


def only_symptoms(log_dir: Path) -> bool:
    """Every failure the ranks left under `log_dir` is a peer's lost connection: the rank that
    failed first left no log (killed from outside), and only its exit code can name it."""
    failures = _failures(log_dir)
    return bool(failures) and all(secondary for secondary, *_ in failures)


def _failures(log_dir: Path) -> list[tuple[bool, int, int, str]]:
    """(secondary, time_ns, rank, text) for each rank that left an error under `log_dir`."""
    failures: list[tuple[bool, int, int, str]] = []
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
    return failures


def rank_root_cause(
    log_dir: Path, first: tuple[int, int] | None, summary: str, returncode: int
) -> str:
    """The earliest failing rank and its exception, from the per-rank error files under
    `log_dir` (<run>/attempt_*/<rank>/), else `first` = (rank, exit code), else `summary`."""
    failures = _failures(log_dir)
    primary = [f for f in failures if not f[0]]
    # A rank killed from outside (kill -9, the OOM killer) leaves no traceback: its peers'
    # lost-connection errors are only symptoms, and the exit code names the signal.
    if not primary and first is not None and first[1] < 0:
        return one_line(f"rank {first[0]}: killed by {_signal_name(-first[1])}")
    if failures:
        _, _, failed_rank, text = min(failures)
        return one_line(f"rank {failed_rank}: {_SOURCE_LOCATION.sub('', text)}")
    if first is not None:
        how = f"killed by {_signal_name(-first[1])}" if first[1] < 0 else f"exit code {first[1]}"
        return one_line(f"rank {first[0]}: {how}")
    last = _exception_line(summary) or next(
        (ln for ln in reversed(summary.splitlines()) if ln.strip()), ""
    )
    return one_line(f"torchrun exited with code {returncode}" + (f": {last}" if last else ""))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
