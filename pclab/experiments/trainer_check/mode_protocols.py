"""The interface a check mode supplies (modes.py registers the modes): its rank side
(`<mode>_rank.py`: RankMode for a scenario of one update, RunMode for one that is more) and
its report side (`<mode>_report.py`: ReportMode). tests/trainer_check/test_modes.py holds
every registered mode's modules to these members and their arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from pclab.experiments.trainer_check.trainer import Trainer

Grid = Sequence[Sequence[int]]  # P x K: counts (token) or items (coupled) per microbatch
Batch = dict[str, Any]  # one microbatch, as the file's own functions read it
Diagnosis = dict[str, Any]  # diagnoses.py
# The reference objective at a model's weights (None: nothing to average, no step)
ReferenceLoss = Callable[["torch.nn.Module"], "torch.Tensor | None"]


class RankSide(Protocol):
    """What every mode's rank side (`<mode>_rank.py`) supplies to worker.py and pipeline.py."""

    SHAPE: str  # the key of a scenario's grid in its entry: label_positions, sizes

    def scenarios(
        self, trainer: Trainer, world: int, accum: int, counts: Grid | None, given: str
    ) -> tuple[dict[str, Grid], list[dict[str, str]]]:
        """The scenarios' grids by name (--counts: one, "custom") and those skipped, why."""
        ...

    def header(self, trainer: Trainer, counts: Grid | None, given: str) -> dict[str, Any]:
        """The mode's own fields of a file's entry, beside the shared ones."""
        ...

    def preflight(self, trainer: Trainer, model: torch.nn.Module) -> list[Diagnosis]:
        """The mode's own contract checks on a fresh model, after the shared ones pass."""
        ...


class RankMode(RankSide, Protocol):
    """A mode whose scenario is one update (token, coupled): pipeline.check_scenario runs
    the shared steps around these."""

    def batches(
        self, trainer: Trainer, name: str, grid: Grid, counts: Grid | None, given: str
    ) -> list[list[Batch]]:
        """Every cell's microbatch, P x K, the same on every rank."""
        ...

    def reference_loss(self, trainer: Trainer, batches: Sequence[Sequence[Batch]]) -> ReferenceLoss:
        """The mode's reference objective over the whole grid, as a function of a model (one
        process; trainer.reference_step takes the update on it)."""
        ...

    def reorders(self, dtype: str) -> bool:
        """Whether the reference is stepped again on the reversed grid for its floor."""
        ...

    def solve(
        self,
        trainer: Trainer,
        batches: list[list[Batch]],
        delta: torch.Tensor,
        model: torch.nn.Module,
    ) -> dict[str, Any]:
        """Rank 0: what the SGD change `delta` says the step optimised (weights, a scheme),
        from the gradients at a fresh `model`'s weights."""
        ...


class RunMode(RankSide, Protocol):
    """A mode whose scenario is a whole run (run): it supplies the scenario's steps itself,
    from the shared parts (Trainer.build, trainer.reference_step, trainer.snapshot,
    states.compare, states.rank_spread)."""

    def check_scenario(
        self, trainer: Trainer, scenario: Any, at: tuple[float, int, str]
    ) -> dict[str, Any]:
        """This rank's evidence on one scenario (`scenario`: pipeline.Scenario)."""
        ...


class ReportMode(Protocol):
    """A mode's report side (`<mode>_report.py`): what report.py asks of it."""

    def judge(
        self, check: Mapping[str, Any], per_scenario: list[list[dict[str, Any]]], run: Any
    ) -> list[dict[str, Any]]:
        """Every scenario's result from its ranks' evidence (`run`: report.RunShape)."""
        ...

    def scenario_diagnoses(
        self, s: dict[str, Any], per_rank: list[dict[str, Any]], check: Mapping[str, Any], run: Any
    ) -> list[Diagnosis]:
        """What one judged scenario's ranks saw, as diagnoses, in the report's order."""
        ...

    def run_diagnoses(
        self, scenarios: list[dict[str, Any]], per_scenario: list[list[dict[str, Any]]]
    ) -> list[Diagnosis]:
        """Diagnoses across the scenarios (an optimizer never stepped, ...)."""
        ...

    def proves(self, s: dict[str, Any]) -> bool:
        """A same_update scenario that counts as evidence for the file's verdict."""
        ...

    def no_evidence_run(self, world_size: int, accum: int) -> Diagnosis:
        """The run's no-evidence diagnosis in this mode's words."""
        ...

    def fields(self, check: Mapping[str, Any]) -> dict[str, Any]:
        """The mode's own fields of a trainer's report (beside the shared ones)."""
        ...
