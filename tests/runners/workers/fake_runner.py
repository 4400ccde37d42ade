"""A stand-in experiment for the ui.runs tests: the Experiment interface without a launch.

It records every call, so a test can tell a cache hit from a fresh run. `position` makes it
report a place in line first; `busy` makes it answer like a launcher whose line is full."""

from __future__ import annotations

from dataclasses import dataclass

from core import validation as v
from runners.results import Outcome, ProgressEvent, RunResult

CALLS: list[dict] = []


@dataclass(frozen=True)
class Params:
    world_size: int = 2
    fail: bool = False
    busy: bool = False
    position: int = 0

    @classmethod
    def checked(cls, world_size=2, fail=False, busy=False, position=0) -> Params:
        size = v.count(world_size, "world_size", minimum=1)
        return cls(size, bool(fail), bool(busy), v.count(position, "position"))


class FakeExperiment:
    name = "fake"
    worker = "tests.runners.workers.fake_runner"  # its own source is the "worker code"
    params = staticmethod(Params.checked)

    def run(self, params: Params, *, progress=None, **_) -> RunResult:
        CALLS.append({k: getattr(params, k) for k in ("world_size", "fail", "busy", "position")})
        if params.busy:
            message = "busy: 1 running and 8 waiting; try again shortly"
            if progress is not None:
                progress(ProgressEvent("busy", message, waiting=8))
            return RunResult.ended(Outcome.BUSY, message, 0.0, "f" * 64)
        if progress is not None:
            if params.position:
                progress(ProgressEvent("queued", "in line", position=params.position, running=1))
            size = params.world_size
            progress(ProgressEvent("start", "starting", world_size=size, worker=self.worker))
            progress(ProgressEvent("rank_done", "rank 0", rank=0, done=1, world_size=size))
            progress("a plain line without an event")
        if params.fail:
            message = "rank 1: ZeroDivisionError: division by zero"
            return RunResult.ended(Outcome.FAILED, message, 0.25, "f" * 64)
        ranks = tuple({"rank": r} for r in range(params.world_size))
        report = {"world_size": params.world_size}
        return RunResult.finished(ranks, 0.25, "f" * 64).with_report(report)


FAKE = FakeExperiment()
