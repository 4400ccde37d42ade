"""Benchmarks of the lab as its users feel it: core calls, page reruns, cold start, real runs,
a press of Run in a real browser, and the hosted demo under many visitors.

    python -m bench                      # everything; rewrites BENCHMARKS.md
    python -m bench --quick --only core  # a few seconds; see `python -m bench --help`

One module per measurement family (core, pages, preload, cold_start, runs, frameworks, clicks,
and hosted for load and soak), each returning a `report.Section`; `report` renders them as
Markdown. Numbers live here, never in timed tests. This file holds the small helpers the
families share.

One module measures the test suite rather than the lab: `suite_cpu`, a pytest plugin that
charges each test with the box's busy CPU-seconds and states the floor that puts under the
suite's wall time (`python -m bench.suite_cpu --help`).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def exit_on_sigterm() -> None:
    """Make SIGTERM end this process through SystemExit, so `finally` blocks stop the
    servers and remove the folders a benchmark started (a plain SIGTERM skips them)."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def loadavg() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (a shared 2-core box: say how busy it was)."""
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def stats(samples: list[float]) -> dict:
    """median, min, max and n of a list of samples (empty -> Nones)."""
    if not samples:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }


def vm_kb(pid: int, field: str = "VmHWM") -> int | None:
    """A /proc/<pid>/status memory field in kB (VmHWM: the peak resident set), None if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def child_json(
    module: str,
    args: list[str],
    timeout_s: float,
    env: dict | None = None,
    python: str | None = None,
) -> dict:
    """Run `python -m <module> *args` (this Python, or `python`) from the repository root and
    parse its last stdout line as JSON. A failure comes back as {"error": "..."} rather than an
    exception."""
    cmd = [python or sys.executable, "-m", module, *args]
    try:
        done = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env or dict(os.environ),
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:g} s: {' '.join(args)}"}
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode != 0 or not lines:
        tail = " ".join((done.stderr or "").strip().splitlines()[-3:])
        return {"error": f"exit {done.returncode}: {tail[-300:]}"}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": f"unparsable output: {lines[-1][:200]}"}
