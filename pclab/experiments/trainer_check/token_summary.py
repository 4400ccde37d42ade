"""The token mode's summary lines (summary.py writes the headline): the run's diagnoses,
then per scenario its verdict, scheme, weights, diagnoses and notes."""

from __future__ import annotations

from typing import Any

from pclab.experiments.trainer_check.summary_words import STATE_UNREAD, VERDICT, number

NOTES = {
    "no_step": "train_step left the parameters unchanged: did it call optimizer.step()?",
    "ranks_differ": "the ranks hold different parameters or optimizer state after the step",
    "zero_must_skip": "with no labels (N = 0) the step must change nothing: no update, "
    "no optimizer state, no step count",
    "control": "equal counts are no evidence: wrong schemes pass this control too",
    "not_finite": "the update is not finite (a mean over an empty microbatch?)",
    "not_linear": "the update is not a weighted sum of microbatch gradients: a regulariser "
    "or weight decay, momentum or an adaptive optimizer inside train_step?",
    "not_identifiable": "the microbatches' gradients are linearly dependent, so their weights "
    "cannot be told apart",
    "optimizer_state_unread": STATE_UNREAD,
}


def lines(check: dict[str, Any], only_failing: bool = False) -> list[str]:
    """The lines under the headline (`only_failing`: the scenarios that differ)."""
    run = [d for d in check.get("diagnoses", []) if d.get("scenario") is None]
    found = [f"  diagnosis {d['code']}: {d['message']}" for d in run]
    for s in check["scenarios"]:
        if not only_failing or s.get("verdict", "different") == "different":
            found.extend(_scenario(s, check))
    for skipped in check["skipped_scenarios"]:
        if not only_failing:
            found.append(f"\n  {skipped['name']:<17} skipped: {skipped['reason']}")
    return found


def _failed(s: dict[str, Any], check: dict[str, Any]) -> list[str] | None:
    """A scenario a rank failed in (trainer_error, collective_mismatch, timeout): its labels
    and its diagnosis, nothing measured; None for a scenario that was judged."""
    failure = [d for d in check.get("diagnoses", []) if d.get("scenario") == s["name"]]
    if s.get("ranks_agree", True) is not None or not failure:
        return None
    placed = "; ".join(" ".join(map(str, row)) for row in s["label_positions"])
    lines = [f"\n  {s['name']:<17} {VERDICT['different']}   not judged: {failure[0]['code']}"]
    lines.append(f"    labels placed {placed}")
    lines.extend(f"    diagnosis {d['code']}: {d['message']}" for d in failure)
    return lines


def _scenario(s: dict[str, Any], check: dict[str, Any]) -> list[str]:
    failed = _failed(s, check)
    if failed is not None:
        return failed
    verdict = s.get("verdict", "same_update" if s["passed"] else "different")
    diff = "undefined" if s["max_abs_diff"] is None else f"{s['max_abs_diff']:.2e}"
    scheme = s["scheme"] or "undefined (N = 0)"
    tolerance = s.get("tolerance", check["tolerance"])
    floor = "" if s.get("floor") is None else f" (floor {s['floor']:.1e})"
    lines = [f"\n  {s['name']:<17} {VERDICT[verdict]}   tolerance {tolerance:.1e}{floor}"]
    residual = number(s["residual"])
    lines.append(f"    max |delta| vs reference {diff}   scheme {scheme}   residual {residual}")
    if s.get("clip_coefficient") is not None:
        lines.append(
            f"    reference clip coefficient {s['clip_coefficient']:.4g} (weights over it)"
        )
    if s["first_divergence"]:
        d = s["first_divergence"]
        lines.append(f"    first divergence: rank {d['rank']}, {d['tensor']} ({d['why']})")
    if s.get("label_positions", s["counts"]) != s["counts"]:
        placed = "; ".join(" ".join(map(str, row)) for row in s["label_positions"])
        lines.append(
            f"    labels placed {placed} (the terms are fewer by the labels at position 0: "
            "a causal LM's shift)"
        )
    lines.append("    counts (terms) / weight x N:")
    weights = s["weights"] or [[None] * len(row) for row in s["counts"]]
    for r, (counts, row) in enumerate(zip(s["counts"], weights)):
        cells = "  ".join(f"{n:>4} / {number(w):>9}" for n, w in zip(counts, row))
        lines.append(f"      rank {r}: {cells}")
    for d in check.get("diagnoses", []):
        if d.get("scenario") == s["name"]:
            lines.append(f"    diagnosis {d['code']}: {d['message']}")
    lines.extend(f"    note: {NOTES.get(note, note)}" for note in s["notes"])
    return lines
