"""The words every mode's summary shares: the headline per status, the verdict per scenario,
and how an undefined number reads."""

from __future__ import annotations

HEADLINE = {
    "same_update": "PASS",
    "different": "FAIL",
    "no_evidence": "NO EVIDENCE",
    "unusable": "UNUSABLE",
}
VERDICT = {"same_update": "same update", "different": "DIFFERENT", "no_evidence": "no evidence"}


def number(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.4g}"
