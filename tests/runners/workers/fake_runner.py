"""A stand-in runner for the ui.runs tests: the RunResult interface without a launch.

It records every call, so a test can tell a cache hit from a fresh run. `position` makes it
report a place in line first; `busy` makes it answer like a launcher whose line is full."""

from __future__ import annotations

from core import validation as v
from runners.launcher import ProgressEvent, RunResult

WORKER = "tests.runners.workers.fake_runner"  # its own source is the "worker code"
CALLS: list[dict] = []


def check_params(world_size: int = 2, fail: bool = False, busy: bool = False, position: int = 0) -> dict:
    params = {"world_size": v.count(world_size, "world_size", minimum=1), "fail": bool(fail)}
    if busy or position:  # only when asked: the other tests' parameters stay as they were
        params.update(busy=bool(busy), position=v.count(position, "position"))
    return params


def run(
    world_size: int = 2, fail: bool = False, busy: bool = False, position: int = 0, *, progress=None
) -> RunResult:
    CALLS.append({"world_size": world_size, "fail": fail, "busy": busy, "position": position})
    if busy:
        message = "busy: 1 running and 8 waiting; try again shortly"
        if progress is not None:
            progress(ProgressEvent("busy", message, waiting=8))
        return RunResult(False, message, (), 0.0, "f" * 64, code="busy")
    if progress is not None:
        if position:
            progress(ProgressEvent("queued", "in line", position=position, running=1))
        progress(ProgressEvent("start", "starting", world_size=world_size, worker=WORKER))
        progress(ProgressEvent("rank_done", "rank 0", rank=0, done=1, world_size=world_size))
        progress("a plain line without an event")
    if fail:
        return RunResult(
            False, "rank 1: ZeroDivisionError: division by zero", (), 0.25, "f" * 64, code="failed"
        )
    ranks = tuple({"rank": r} for r in range(world_size))
    return RunResult(True, "", ranks, 0.25, "f" * 64, report={"world_size": world_size})
