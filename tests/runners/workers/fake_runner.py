"""A stand-in runner for the ui.runs tests: the RunResult interface without a launch.

It records every call, so a test can tell a cache hit from a fresh run."""

from __future__ import annotations

from core import validation as v
from runners.launcher import ProgressEvent, RunResult

WORKER = "tests.runners.workers.fake_runner"  # its own source is the "worker code"
CALLS: list[dict] = []


def check_params(world_size: int = 2, fail: bool = False) -> dict:
    return {"world_size": v.count(world_size, "world_size", minimum=1), "fail": bool(fail)}


def run(world_size: int = 2, fail: bool = False, *, progress=None) -> RunResult:
    CALLS.append({"world_size": world_size, "fail": fail})
    if progress is not None:
        progress(ProgressEvent("start", "starting", world_size=world_size, worker=WORKER))
        progress(ProgressEvent("rank_done", "rank 0", rank=0, done=1, world_size=world_size))
        progress("a plain line without an event")
    if fail:
        return RunResult(False, "rank 1: ZeroDivisionError: division by zero", (), 0.25, "f" * 64)
    ranks = tuple({"rank": r} for r in range(world_size))
    return RunResult(True, "", ranks, 0.25, "f" * 64, report={"world_size": world_size})
