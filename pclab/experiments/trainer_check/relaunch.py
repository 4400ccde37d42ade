"""The trainer check's launch: a rank that dies in one scenario (a Gloo size mismatch aborts the
process; a segfault; an os._exit in the trainer) costs that scenario only.

The first launch is the plain one (identical requests still share it). When it fails, the
check runs again with --progress-dir: every rank appends each scenario it starts and judges to
<dir>/rank<r>.jsonl; when a launch fails again, the scenario its ranks were in gets the
launcher's one line as its diagnosis (failures.launch_failed) and the next launch starts
after it (--skip), in the time that is left. The ranks' outputs are then put together from
those lines, as if one launch had run them all. A failure before any scenario started (a
preflight, an import in the worker) is the run's failure, as before.
"""

from __future__ import annotations

import json
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from pclab.experiments.trainer_check.failures import launch_failed
from pclab.runners.launcher import launch
from pclab.runners.results import Outcome, RunResult

MIN_RELAUNCH_S = 5.0  # less time than this left: report what was judged


def _lines(progress: Path, rank: int) -> list[dict[str, Any]]:
    path = progress / f"rank{rank}.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _died_in(progress: Path, world_size: int, skip: int) -> dict[str, Any] | None:
    """The "started" line of the first scenario from `skip` on that some rank started and
    not every rank finished; None when no rank started one."""
    per_rank = [_lines(progress, r) for r in range(world_size)]
    started = {ln["started"]: ln for lines in per_rank for ln in lines if "started" in ln}
    done = [{ln["unit"] for ln in lines if "scenario" in ln} for lines in per_rank]
    for unit in sorted(u for u in started if u >= skip):
        if not all(unit in d for d in done):
            return started[unit]
    return None


def _payload(
    lines: list[dict[str, Any]], failed: dict[int, dict[str, Any]], top: dict[str, Any]
) -> dict[str, Any]:
    """One rank's output, as one launch would have written it, from its progress lines."""
    headers = {ln["unit"]: ln for ln in lines if "header" in ln}
    entries = {ln["unit"]: ln["scenario"] for ln in lines if "scenario" in ln}
    entries |= failed
    checks = []
    for first in sorted(headers):
        header = headers[first]
        units = range(first, first + header["units"])
        scenarios = [entries[u] for u in units if u in entries]
        checks.append(
            {**header["header"], "scenarios": scenarios, "diagnoses": header["diagnoses"]}
        )
    return {**top, "checks": checks}


def run_check(
    worker: str, params: Any, first: RunResult, timeout_s: float, **launch_options: Any
) -> RunResult:
    """`first` (a failed plain launch of `params`) run again scenario by scenario, as the
    module docstring says; the result's ranks are whole, or the first failure as it was."""
    deadline = time.monotonic() + timeout_s
    failed: dict[int, dict[str, Any]] = {}
    last = first
    with tempfile.TemporaryDirectory(prefix="pcl-check-progress-") as folder:
        progress, skip = Path(folder), 0
        while True:
            left = deadline - time.monotonic()
            if left < MIN_RELAUNCH_S:
                break
            args = [*params.worker_args(), "--progress-dir", folder, "--skip", str(skip)]
            last = launch(worker, params.world_size, args, timeout_s=left, **launch_options)
            if last.ok or last.outcome not in (Outcome.FAILED, Outcome.TIMEOUT):
                break
            died = _died_in(progress, params.world_size, skip)
            if died is None:
                break
            scenario = launch_failed(died["name"], last.outcome.value, last.message)
            entry = {"name": died["name"], "label_positions": died["label_positions"]}
            failed[died["started"]] = {**entry, "failure": scenario}
            skip = died["started"] + 1
        if not failed:
            return first if not last.ok else last
        top = {
            "world_size": params.world_size,
            "accum_steps": params.accum_steps,
            "tolerance": params.tolerance,
            "backend": "nccl" if params.device == "cuda" else "gloo",
            "torch": metadata.version("torch"),
        }
        ranks = tuple(
            {**top, "rank": r, **_payload(_lines(progress, r), failed, top)}
            for r in range(params.world_size)
        )
    return RunResult.finished(
        ranks, timeout_s - max(0.0, deadline - time.monotonic()), first.worker_hash
    )
