"""How one kind of run file's evidence is read (run_report.READING: the token mean's weights;
coupled_run_report.READING: a coupled loop's pools), and the epoch's tail judged by it: the
scheme every full window shares, and the tail's factor on that scheme."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pclab.experiments.trainer_check.run_messages as run_messages
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.judging import RunShape


@dataclass(frozen=True)
class Reading:
    """How one kind of run file's evidence is read (the token mean's: READING, below; a
    coupled loop's pools: coupled_run_report): its grid's key, how rank 0's solve names each
    update, what a scenario can support, and the factor between an update and a scheme."""

    shape: str
    attach: Callable[[list[dict[str, Any]], list[dict[str, Any]], float], None]
    claims: Callable[[dict[str, Any], Mapping[str, Any], RunShape], list[str]]
    scale: Callable[[dict[str, Any], str], float | None]


def full_scheme(s: dict[str, Any], k: int, reading: Reading) -> str | None:
    """The one scheme whose weights every full window with a solve has (a skipped N = 0
    window has none; a window whose counts cannot tell two schemes apart fits both)."""
    full = [u for u in s["updates"] if u["microsteps"] == k and not u["skipped"]]
    full = [u for u in full if u.get("scheme")]
    for name in sorted({u["scheme"] for u in full} - {"other"}):
        scales = [reading.scale(u, name) for u in full]
        if all(c is not None and abs(c - 1) < 1e-6 for c in scales):
            return str(name)
    return None


def tail_scaled(s: dict[str, Any], k: int, reading: Reading) -> list[Diagnosis]:
    """tail_window_scaled: a tail whose weights are k'/K times the full windows' scheme's."""
    scheme = full_scheme(s, k, reading)
    if scheme is None:
        return []
    tails = [u for u in s["updates"] if u["num_valid_labels"] and u["microsteps"] < k]
    for u in tails:
        c = reading.scale(u, scheme)
        if c is not None and abs(c - u["microsteps"] / k) < 1e-6:
            return [run_messages.tail_window_scaled(s["name"], c, u["microsteps"], k, scheme)]
    return []
