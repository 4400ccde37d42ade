"""The trainer check's modes, registered once: what each kind of trainer file is judged by.

Every mode runs through the same pipeline (pipeline.py on a rank, report.py in the command):
the same preflight, launcher, scenario guard, comparison, SGD re-run, report, summary header,
exit codes and CLI. A mode supplies only what differs, in three modules named after it:

    <mode>_contract.py  claims(module) -> bool: the file is this mode's (read once, by
                        trainer_file.load); problems(module) -> [what it lacks]; SIGNATURES
    <mode>_rank.py      on a rank (torch): SHAPE (the scenario's shape key), scenarios(),
                        header(), preflight(), reference_step(), REORDERS(dtype), solve()
    <mode>_report.py    in the command (no torch): judge(), the scenarios' and the run's
                        own diagnoses, proves(), no_evidence_run(), fields()
    <mode>_summary.py   lines(check, only_failing): the summary under the shared headline

A new mode is those four modules and one line in MODES (before "token", which claims every
file the others do not). The protocols below are the whole interface; mypy holds a mode's
modules to them (tests/trainer_check/test_modes.py checks every member and its arguments).

    python -c "from pclab.experiments.trainer_check import modes; print(modes.NAMES)"
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, cast

from pclab.experiments.trainer_check import coupled_contract, run_contract, token_contract

if TYPE_CHECKING:
    import torch

    from pclab.experiments.trainer_check.trainer_file import Trainer

Grid = Sequence[Sequence[int]]  # P x K: counts (token) or items (coupled) per microbatch
Batch = dict[str, Any]  # one microbatch, as the file's own functions read it
Diagnosis = dict[str, Any]  # diagnoses.py


@dataclass(frozen=True)
class Mode:
    """One mode: its name (the JSON's "mode" where it is not "token") and its contract (a
    module whose claims/problems/SIGNATURES read the file). Its other sides are the modules
    named after it, imported when used (the report side never imports torch)."""

    name: str
    contract: ModuleType

    def _side(self, side: str) -> Any:
        return importlib.import_module(f"pclab.experiments.trainer_check.{self.name}_{side}")

    def rank_side(self) -> RankMode | RunMode:
        side: RankMode | RunMode = self._side("rank")
        return side

    def report_side(self) -> ReportMode:
        return cast("ReportMode", self._side("report"))

    def summary_lines(self, check: dict[str, Any], only_failing: bool) -> list[str]:
        lines: list[str] = self._side("summary").lines(check, only_failing)
        return lines


MODES = (  # the first mode whose contract claims a file checks it
    Mode("run", run_contract),
    Mode("coupled", coupled_contract),
    Mode("token", token_contract),
)
NAMES = tuple(m.name for m in MODES)


def named(name: str) -> Mode:
    """The mode called `name` (a report's "mode", "token" when it has none)."""
    return next(m for m in MODES if m.name == name)


def of_module(module: ModuleType) -> Mode:
    """The mode a trainer file is checked in: the first whose contract claims it."""
    return next(m for m in MODES if m.contract.claims(module))


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

    def reference_step(
        self,
        trainer: Trainer,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batches: Sequence[Sequence[Batch]],
    ) -> None:
        """One update of the mode's reference objective on the whole grid, one process."""
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
    from pipeline.py's parts (build, snapshot, compare, rank_spread)."""

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
