"""The trainer check's modes, registered once: what each kind of trainer file is judged by.

Every mode runs through the same pipeline (pipeline.py on a rank, report.py in the command):
the same preflight, launcher, scenario guard, comparison, SGD re-run, report, summary header,
exit codes and CLI. A mode supplies only what differs, in three modules named after it:

    <mode>_contract.py  claims(module) -> bool: the file is this mode's (read once, by
                        trainer_file.load); problems(module) -> [what it lacks]; SIGNATURES
    <mode>_rank.py      on a rank (torch): SHAPE (the scenario's shape key), scenarios(),
                        header(), preflight(), batches(), reference_loss(), reorders(dtype),
                        solve()
    <mode>_report.py    in the command (no torch): judge(), the scenarios' and the run's
                        own diagnoses, proves(), no_evidence_run(), fields()
    <mode>_summary.py   lines(check, only_failing): the summary under the shared headline

A new mode is those four modules and one line in MODES (before "token", which claims every
file the others do not). The protocols below are the whole interface; mypy holds a mode's
modules to them (mode_protocols.py; tests/trainer_check/test_modes.py checks every member and
its arguments).

    python -c "from pclab.experiments.trainer_check import modes; print(modes.NAMES)"
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pclab.experiments.trainer_check.coupled_contract as coupled_contract
import pclab.experiments.trainer_check.coupled_run_contract as coupled_run_contract
import pclab.experiments.trainer_check.run_contract as run_contract
import pclab.experiments.trainer_check.token_contract as token_contract


@dataclass(frozen=True)
class Mode:
    """One mode: its name (the JSON's "mode" where it is not "token") and its contract (a
    module whose claims/problems/SIGNATURES read the file). Its other sides are the modules
    named after it, imported when used (the report side never imports torch)."""

    name: str
    contract: ModuleType

    def _side(self, side: str) -> Any:
        return importlib.import_module(f"pclab.experiments.trainer_check.{self.name}_{side}")

    def rank_side(self) -> Any:
        """Its `<name>_rank` module: a mode_protocols.RankMode, or a RunMode."""
        return self._side("rank")

    def report_side(self) -> Any:
        """Its `<name>_report` module: a mode_protocols.ReportMode."""
        return self._side("report")

    def summary_lines(self, check: dict[str, Any], only_failing: bool) -> list[str]:
        lines: list[str] = self._side("summary").lines(check, only_failing)
        return lines


MODES = (  # the first mode whose contract claims a file checks it
    Mode("coupled_run", coupled_run_contract),  # before "run", which claims every train_loop
    Mode("run", run_contract),
    Mode("coupled", coupled_contract),
    Mode("token", token_contract),
)
NAMES = tuple(m.name for m in MODES)


def named(name: str) -> Mode:
    """The mode called `name` (a report's "mode", "token" when it has none)."""
    return next(m for m in MODES if m.name == name)


def counts_refused(name: str) -> str | None:
    """Why the mode called `name` takes no --counts (its scenarios are a whole run's), or None."""
    refused: str | None = getattr(named(name).contract, "COUNTS_REFUSED", None)
    return refused


def of_module(module: ModuleType) -> Mode:
    """The mode a trainer file is checked in: the first whose contract claims it."""
    return next(m for m in MODES if m.contract.claims(module))
