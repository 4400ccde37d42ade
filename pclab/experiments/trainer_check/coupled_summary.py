"""The coupled mode's summary lines (summary.py writes the headline): the diagnoses, then
per scenario its verdict, the scheme with its one-line
explanation, the schemes it cannot be told from, and a scaled update's factor per group."""

from __future__ import annotations

from typing import Any

from pclab.experiments.trainer_check.coupled_report import FIXES, SCHEME_EXPLANATIONS
from pclab.experiments.trainer_check.summary_words import VERDICT, number


def lines(check: dict[str, Any], only_failing: bool = False) -> list[str]:
    """The lines under the headline (`only_failing`: the scenarios that differ)."""
    lines = [f"  diagnosis {d['code']}: {d['message']}" for d in check["diagnoses"]]
    # Imported here: core.coupled_objectives imports torch, which the pages must not pay for.
    from pclab.core.coupled_objectives import identical_objectives

    alike = identical_objectives(check["world_size"], check["accum_steps"])
    for s in check["scenarios"]:
        if not only_failing or s["verdict"] == "different":
            lines.extend(_scenario(s, alike, VERDICT))
    wrong = next((s["scheme"] for s in check["scenarios"] if s["verdict"] == "different"), None)
    if wrong in FIXES:
        lines.append(f"\n  fix: {FIXES[wrong]}")
    return lines


def _scenario(
    s: dict[str, Any], alike: tuple[tuple[str, ...], ...], verdicts: dict[str, str]
) -> list[str]:
    sizes = "; ".join(" ".join(map(str, row)) for row in s["sizes"])
    diff = "undefined" if s["max_abs_diff"] is None else f"{s['max_abs_diff']:.2e}"
    lines = [
        f"\n  {s['name']:<19} {verdicts[s['verdict']]}   items {sizes}   "
        f"max |delta| vs reference {diff}   tolerance {s['tolerance']:.1e}",
        f"    scheme {s['scheme']}: {SCHEME_EXPLANATIONS.get(s['scheme'] or '', s['explanation'])}",
    ]
    if s.get("ranks_agree", False) is None:  # failed (trainer_error, collective_mismatch, ...)
        lines[1] = f"    {s['explanation']}"
    also = [m for m in s["matching_schemes"] if m != s["scheme"]]
    if also:
        same = any(set(also) | {s["scheme"]} <= set(group) for group in alike)
        why = " (the same objective at this P and K)" if same else ""
        lines.append(f"    this scenario cannot tell it from: {', '.join(also)}{why}")
    for group in s["scale_groups"]:
        names = ", ".join(group["parameters"])
        lines.append(f"    factor {group['factor']:.6g} on {names}")
    if s["scheme"] == "other":
        lines.append(f"    residual {number(s['residual'])} (the best per-parameter fit's)")
        best = min(
            (f for f in s["fits"].items() if f[1]["residual"] is not None),
            key=lambda f: f[1]["residual"],
            default=None,
        )
        if best is not None:
            name, fit = best
            lines.append(
                f"    closest: {name} x {number(fit['factor'])}, residual {number(fit['residual'])}"
            )
    if s["first_divergence"]:
        d = s["first_divergence"]
        lines.append(f"    first divergence: rank {d['rank']}, {d['tensor']} ({d['why']})")
    if s.get("clip_coefficient") is not None:
        lines.append(f"    reference clip coefficient {s['clip_coefficient']:.4g} (change over it)")
    lines.extend(f"    note: {note}" for note in s["notes"])
    return lines
