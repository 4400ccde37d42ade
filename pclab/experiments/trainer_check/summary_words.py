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
STATE_UNREAD = (  # the note optimizer_state_unread, in every mode's summary
    "a wrapper's optimizer stepped (ZeRO's flat partitions): its state is not read, the "
    "parameters are compared alone"
)


def number(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.4g}"
