"""Resume, checked for real (the command side): a resumable train_loop (its fifth parameter,
checkpoint_dir) is killed at chosen points and started again from its own checkpoint, in
fresh processes, until the run ends; each restarted run is judged against the loop's straight
run and the one-process reference (resume_worker.py, resume_judge.py).

The kill points, on the mode's resume scenario (the run mode's `uneven`; a coupled run's first:
run_rank.Objective.resume_scenario), epochs of M = 2K + 1 microbatches: every rank SIGKILLs
itself at the forward of one microbatch, so that what the loop had done before it is all that
survives:

    mid_epoch       after the first update (the forward of window 1's first microbatch)
    mid_window      after the first backward of window 1 (K >= 2): a window half accumulated
    before_tail     after window 1's update, just before the epoch's tail (K >= 2)
    epoch_boundary  after the epoch's last update (the next epoch's first forward)

Each point is two launches, the killed one and the resumed one, each in its own folder
(removed afterwards): its cost is two cold (or warm-pool) launches.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pclab.experiments.trainer_check.run_messages as run_messages
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.run_scenarios import microbatches_per_epoch
from pclab.runners.results import ProgressEvent

WORKER = "pclab.experiments.trainer_check.resume_worker"


def kill_points(accum: int) -> list[tuple[str, int]]:
    """(name, the run index of the microbatch whose forward the ranks die at), in run order."""
    k, m = accum, microbatches_per_epoch(accum)
    points = [("mid_epoch", k + 1)]
    if k >= 2:
        points += [("mid_window", k + 2), ("before_tail", 2 * k + 1)]
    points.append(("epoch_boundary", m + 1))
    return points


def check(
    trainer: str, world_size: int, accum: int, tolerance: float, **launch_options: Any
) -> list[dict[str, Any]]:
    """One entry per kill point: where the run was killed and resumed from, the verdict
    (same_run or different), the first update that parts from the straight run and from the
    reference, and the codes of what went wrong."""
    from pclab.runners.launcher import launch

    found = []
    for name, at in kill_points(accum):
        with tempfile.TemporaryDirectory(prefix="pcl_resume_") as root:
            folders = {"checkpoint": Path(root, "checkpoint"), "trace": Path(root, "trace")}
            for folder in folders.values():
                folder.mkdir()
            common = [
                *("--trainer", str(Path(trainer).resolve()), "--accum", str(accum)),
                *("--kill-at", str(at), "--tolerance", repr(tolerance)),
                *("--checkpoint-dir", str(folders["checkpoint"])),
                *("--trace-dir", str(folders["trace"])),
            ]
            planned = launch_options | {"progress": _planned(launch_options.get("progress"), at)}
            killed = launch(WORKER, world_size, [*common, "--phase", "killed"], **planned)
            if killed.ok:  # the loop ended before the point: nothing was killed
                found.append({"point": name, "killed_at": at, "verdict": "not_killed"})
                continue
            resumed = launch(WORKER, world_size, [*common, "--phase", "resumed"], **launch_options)
        if not resumed.ok:
            entry = {"point": name, "killed_at": at, "verdict": "different"}
            found.append(entry | {"codes": ["not_resumable"], "message": resumed.message})
            continue
        payload = {k: v for k, v in resumed.ranks[0].items() if k not in ("rank", "killed")}
        found.append({"point": name, **payload})
    return found


def _planned(
    progress: Callable[[ProgressEvent], None] | None, at: int
) -> Callable[[ProgressEvent], None] | None:
    """The killed launch's progress with its kill said as planned, never as a failure: the
    ranks' SIGKILL at microbatch `at` is the check's own doing (any other failure is said as
    it came)."""
    if progress is None:
        return None

    def forward(event: ProgressEvent) -> None:
        if event.event == "failed" and "killed by SIGKILL" in str(event.values.get("message")):
            text = f"killed on every rank at microbatch {at}, as planned: restarting it"
            event = ProgressEvent.of("kill_point", text, microbatch=at)
        progress(event)

    return forward


def diagnoses(entries: list[dict[str, Any]]) -> list[Diagnosis]:
    """One diagnosis per code, naming the kill points that showed it, in the codes' order."""
    by_code: dict[str, list[str]] = {}
    for entry in entries:
        for code in entry.get("codes", []):
            by_code.setdefault(code, []).append(entry["point"])
    message = next((e["message"] for e in entries if e.get("message")), "")
    return [run_messages.resume_code(code, points, message) for code, points in by_code.items()]
