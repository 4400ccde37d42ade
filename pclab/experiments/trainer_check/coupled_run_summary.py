"""The coupled run mode's summary lines: the run mode's (run_summary.py), each window's size
counted in items and its scheme the pool the loop's step optimised."""

from __future__ import annotations

from typing import Any

import pclab.experiments.trainer_check.run_summary as run_summary


def lines(check: dict[str, Any], only_failing: bool = False) -> list[str]:
    """The lines under the headline (`only_failing`: the scenarios that differ)."""
    return run_summary.lines(check, only_failing, count="items")
