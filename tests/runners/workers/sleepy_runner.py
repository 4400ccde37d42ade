"""An experiment for the Streamlit stop test: a real launch of the `sleeps` worker (no torch in
the ranks), shaped like the registry's experiments (ui.runs takes it directly)."""

from __future__ import annotations

from dataclasses import dataclass

from pclab.core import validation as v
from pclab.experiments.base import Experiment


@dataclass(frozen=True)
class Params:
    seconds: float = 120.0
    world_size: int = 2

    @classmethod
    def checked(cls, seconds: float = 120.0) -> Params:
        return cls(seconds=v.positive(seconds, "seconds"))

    def worker_args(self) -> list[str]:
        return ["--seconds", repr(self.seconds)]


EXPERIMENT = Experiment(
    name="sleepy",
    worker="tests.runners.workers.sleeps",
    params=Params.checked,
    build_report=lambda ranks: {"world_size": len(ranks)},
    agrees=lambda report: report["world_size"] == 2,  # no reference: every rank reported
    timeout_s=300.0,
)
