"""The trainer check's human summary: what `pclab check` prints without --json, what a
hand-typed torchrun prints after its report.json, and what a failing `assert_same_update`
raises with. The headline (verdict, file, the run's shape) is the same in every mode; the
lines under it are the mode's (`<mode>_summary.lines`, modes.py): diagnoses, then per scenario
its verdict and what the step optimised."""

from __future__ import annotations

from typing import Any

import pclab.experiments.trainer_check.modes as modes
from pclab.experiments.trainer_check.summary_words import HEADLINE


def headline(check: dict[str, Any]) -> str:
    """'PASS  trainer.py  (P=2 K=2 tolerance=1e-10)', the mode named where it is not token."""
    mode = check.get("mode", "token")
    status = check.get("status", "same_update" if check["passed"] else "different")
    shape = f"P={check['world_size']} K={check['accum_steps']} tolerance={check['tolerance']:g}"
    extras = [f"dtype={check['dtype']}"] if check.get("dtype", "float64") != "float64" else []
    if check.get("max_grad_norm") is not None:
        extras.append(f"max_grad_norm={check['max_grad_norm']:g}")
    if check.get("device", "cpu") != "cpu":
        extras.append(f"device={check['device']}")
    named = "" if mode == "token" else f"{mode}: "
    return f"{HEADLINE[status]}  {check['trainer']}  ({named}{' '.join([shape, *extras])})"


def render(check: dict[str, Any], only_failing: bool = False) -> str:
    """The summary of one trainer's check (`only_failing`: the scenarios that differ and
    the diagnoses, what a failing CI run needs to read first)."""
    lines = modes.named(check.get("mode", "token")).summary_lines(check, only_failing)
    return "\n".join([headline(check), *lines])
