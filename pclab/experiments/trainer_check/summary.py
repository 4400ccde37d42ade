"""The trainer check's human summary: what `pclab check` prints without --json, what a
hand-typed torchrun prints after its report.json, and what a failing `assert_same_update`
raises with. Verdict and diagnoses first, then per scenario its verdict, scheme and weights."""

from __future__ import annotations

from typing import Any

from pclab.experiments.trainer_check.coupled_summary import render as coupled_render

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
}
HEADLINE = {
    "same_update": "PASS",
    "different": "FAIL",
    "no_evidence": "NO EVIDENCE",
    "unusable": "UNUSABLE",
}
VERDICT = {"same_update": "same update", "different": "DIFFERENT", "no_evidence": "no evidence"}


def _number(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.4g}"


def render(check: dict[str, Any], only_failing: bool = False) -> str:
    """The summary of one trainer's check (`only_failing`: the scenarios that differ and
    the diagnoses, what a failing CI run needs to read first)."""
    if check.get("mode") == "coupled":  # issue 28: schemes, not weights
        return coupled_render(check, (HEADLINE, VERDICT), only_failing)
    status = check.get("status", "same_update" if check["passed"] else "different")
    shape = f"P={check['world_size']} K={check['accum_steps']} tolerance={check['tolerance']:g}"
    extras = [f"dtype={check['dtype']}"] if check.get("dtype", "float64") != "float64" else []
    if check.get("max_grad_norm") is not None:
        extras.append(f"max_grad_norm={check['max_grad_norm']:g}")
    if check.get("device", "cpu") != "cpu":
        extras.append(f"device={check['device']}")
    lines = [f"{HEADLINE[status]}  {check['trainer']}  ({' '.join([shape, *extras])})"]
    for d in check.get("diagnoses", []):
        if d.get("scenario") is None:
            lines.append(f"  diagnosis {d['code']}: {d['message']}")
    for s in check["scenarios"]:
        if not only_failing or s.get("verdict", "different") == "different":
            lines.extend(_scenario(s, check))
    for skipped in check["skipped_scenarios"]:
        if not only_failing:
            lines.append(f"\n  {skipped['name']:<17} skipped: {skipped['reason']}")
    return "\n".join(lines)


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
    residual = _number(s["residual"])
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
        cells = "  ".join(f"{n:>4} / {_number(w):>9}" for n, w in zip(counts, row))
        lines.append(f"      rank {r}: {cells}")
    for d in check.get("diagnoses", []):
        if d.get("scenario") == s["name"]:
            lines.append(f"    diagnosis {d['code']}: {d['message']}")
    lines.extend(f"    note: {NOTES.get(note, note)}" for note in s["notes"])
    return lines
