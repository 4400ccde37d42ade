"""A stand-in experiment for the ui.runs tests: the Experiment interface without a launch.

It records every call, so a test can tell a cache hit from a fresh run. `position` makes it
report a place in the run queue first; `busy` makes it answer like a launcher whose run queue
is full."""

from __future__ import annotations

from dataclasses import dataclass

from pclab.core import validation as v
from pclab.runners.results import Outcome, ProgressEvent, RunResult

CALLS: list[dict] = []


@dataclass(frozen=True)
class Params:
    world_size: int = 2
    fail: bool = False
    busy: bool = False
    position: int = 0
    seconds: float = 0.0  # > 0: the run takes this long, through runners.run_queue (heartbeats)
    fallback: bool = False  # the launcher's "warm pool unavailable" event first
    memory: bool = False  # refused for the memory budget

    @classmethod
    def checked(
        cls,
        world_size=2,
        fail=False,
        busy=False,
        position=0,
        seconds=0.0,
        fallback=False,
        memory=False,
    ) -> Params:
        size = v.count(world_size, "world_size", minimum=1)
        return cls(
            size,
            bool(fail),
            bool(busy),
            v.count(position, "position"),
            float(seconds),
            bool(fallback),
            bool(memory),
        )


class FakeExperiment:
    name = "fake"
    worker = "tests.runners.workers.fake_runner"  # its own source is the "worker code"
    params = staticmethod(Params.checked)

    def run(self, params: Params, *, progress=None, cancel=None, runtime=None, **_) -> RunResult:
        CALLS.append({k: getattr(params, k) for k in ("world_size", "fail", "busy", "position")})
        if params.memory:
            message = "busy: the lab's processes use 2600 MB of their 2500 MB memory budget"
            if progress is not None:
                values = {"reason": "memory", "used_mb": 2600, "budget_mb": 2500}
                progress(ProgressEvent.of("busy", message, waiting=0, **values))
            return RunResult.ended(Outcome.BUSY, message, 0.0, "f" * 64)
        if params.fallback and progress is not None:
            progress(ProgressEvent.of("pool_fallback", "no pool", reason="a test said so"))
        if params.seconds:
            return self._through_run_queue(params, progress, cancel, runtime)
        if params.busy:
            message = "busy: 1 running and 8 waiting; try again shortly"
            if progress is not None:
                progress(ProgressEvent.of("busy", message, waiting=8))
            return RunResult.ended(Outcome.BUSY, message, 0.0, "f" * 64)
        if progress is not None:
            if params.position:
                progress(
                    ProgressEvent.of(
                        "queued", "in the run queue", position=params.position, running=1
                    )
                )
            size = params.world_size
            progress(ProgressEvent.of("start", "starting", world_size=size, worker=self.worker))
            progress(ProgressEvent.of("rank_done", "rank 0", rank=0, done=1, world_size=size))
            # values the catalogue's text cannot be filled from: the page shows the English text
            progress(ProgressEvent.of("rank_done", "a line the catalogue cannot fill", rank=1))
        if params.fail:
            message = "rank 1: ZeroDivisionError: division by zero"
            return RunResult.ended(Outcome.FAILED, message, 0.25, "f" * 64)
        ranks = tuple({"rank": r} for r in range(params.world_size))
        report = {"world_size": params.world_size}
        return RunResult.finished(ranks, 0.25, "f" * 64).with_report(report)

    def _through_run_queue(self, params: Params, progress, cancel, runtime) -> RunResult:
        """A run that takes `params.seconds`, submitted to the runtime's real run queue: its
        requester polls, forwards events and calls the page's heartbeat as a launch would."""
        import time

        from pclab.runners.runtime import given_or_fresh

        def work(run):
            run.say("start", "starting", world_size=params.world_size, worker=self.worker)
            time.sleep(params.seconds)
            ranks = tuple({"rank": r} for r in range(params.world_size))
            result = RunResult.finished(ranks, params.seconds, "f" * 64)
            return result.with_report({"world_size": params.world_size})

        key = ("fake", params)
        with given_or_fresh(runtime) as used:
            return used.run_queue.submit(
                key, work, timeout_s=30, worker_hash="f" * 64, progress=progress, cancel=cancel
            )


FAKE = FakeExperiment()
