"""The trainer check's launch: a rank that dies in one scenario (a Gloo size mismatch aborts the
process; a segfault; an os._exit in the trainer) costs that scenario only.

The first launch is the plain one (identical requests still share it). When it fails, the
check runs again with --progress-dir: every rank appends each scenario it starts and judges to
<dir>/rank<r>.jsonl; when a launch fails again, the scenario its ranks were in gets the
launcher's one line as its diagnosis (failures.launch_failed) and the next launch starts
after it (--skip), in the time that is left (no launch once no scenario is left). What each
rank was doing goes with it: what a surviving rank saw (its "seen" line) or the stack
faulthandler left in <dir>/rank<r>.stack, or the trainer function it last entered
(<dir>/rank<r>.doing; units.Units.watch_stack). Both modes of the check
write these lines (guard.run_units). The ranks' outputs are then put together from those
lines, as if one launch had run them all. A failure before any scenario started (a
preflight, an import in the worker) is the run's failure, as before.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from pclab.experiments.trainer_check.doing import CHECK_STEPS
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


def _all_done(progress: Path, skip: int, trainers: int) -> bool:
    """Every trainer file's header written (on rank 0) and no scenario of theirs from `skip`
    on: a launch from there would run none."""
    headers = [ln for ln in _lines(progress, 0) if "header" in ln]
    firsts = {ln["unit"]: ln["units"] for ln in headers}
    return len(firsts) >= trainers and all(first + n <= skip for first, n in firsts.items())


FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')
CHECK_DIR = "pclab/experiments/trainer_check/"  # the check's own frames
OWN_STEPS = f"in {CHECK_STEPS}"


def _doing(progress: Path, world_size: int, unit: int) -> dict[int, str]:
    """What each rank was doing in scenario `unit` when the launch ended: what it saw there,
    when it caught the failure (guard.alone's "seen" line: "in train_step(): a peer left the
    collective"), else from the stacks faulthandler left (units.Units.watch_stack): the
    trainer function the check had called and the innermost line of the user's code. A rank
    stopped after its trainer function raised, before it wrote what it saw, is in the check's
    own frames by then: the function it last entered (rank<r>.doing) says where it failed.
    Else the check's own step. Ranks without any of these are left out."""
    found: dict[int, str] = {}
    for rank in range(world_size):
        seen = [
            ln["seen"]["text"]
            for ln in _lines(progress, rank)
            if ln.get("unit") == unit and "seen" in ln
        ]
        if seen:
            found[rank] = seen[-1]
            continue
        stack, doing = (progress / f"rank{rank}.{kind}" for kind in ("stack", "doing"))
        where = _from_stack(stack.read_text(errors="replace")) if stack.is_file() else None
        last = doing.read_text(errors="replace").strip() if doing.is_file() else ""
        if last and (where is None or where.startswith(OWN_STEPS)) and last.endswith("()"):
            where = f"in {last}"  # a trainer function: left by its exception, or no stack
        if where is not None:
            found[rank] = where
    return found


def _from_stack(text: str) -> str | None:
    """The main thread's place in a faulthandler dump (the thread running the scenarios): the
    trainer function and the innermost line of the user's code, or the check's own step."""
    threads = [[FRAME.match(ln) for ln in block.splitlines()] for block in text.split("\n\n")]
    main = next((t for t in threads if any(m and m["function"] == "run_units" for m in t)), [])
    frames = [m for m in main if m]  # most recent first
    called = next((i for i, m in enumerate(frames) if _calls_the_file(m)), None)
    if called is None:
        own = next((m for m in frames if CHECK_DIR in m["path"]), None)
        return None if own is None else f"{OWN_STEPS} ({own['function']})"
    user = [m for m in frames[:called] if not _library(m["path"]) and CHECK_DIR not in m["path"]]
    if not user:
        return None
    inner, outer = user[0], user[-1]
    name = Path(inner["path"]).name
    return f"in {outer['function']}() at {name}:{inner['line']} in {inner['function']}"


def _calls_the_file(frame: re.Match[str]) -> bool:
    """Trainer.call's frame: below it, the file's own function (trainer.py's other frames,
    such as Trainer.build or on_device, are the check's own steps)."""
    return frame["path"].endswith(f"{CHECK_DIR}trainer.py") and frame["function"] == "call"


def _library(path: str) -> bool:
    """A frame of torch, the standard library or an installed package: not the user's."""
    return "site-packages" in path or "/lib/python3" in path or path.startswith("<")


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
            entry = {k: v for k, v in died.items() if k != "started"}  # name and shape
            doing = _doing(progress, params.world_size, died["started"])
            scenario = launch_failed(entry, last.outcome.value, last.message, doing)
            failed[died["started"]] = {**entry, "failure": scenario}
            skip = died["started"] + 1
            if _all_done(progress, skip, len(params.trainers)):
                break  # no scenario left to run: no launch for nothing
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
