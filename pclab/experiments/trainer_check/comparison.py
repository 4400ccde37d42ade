"""A scenario's comparison with the single-process reference, every rank's together: what both
modes' reports judge a scenario by (the ranks' own comparisons: worker.compare_updates).

    python -c "from pclab.experiments.trainer_check.comparison import compared; help(compared)"
"""

from __future__ import annotations

from typing import Any


def compared(per_rank: list[dict[str, Any]], tolerance: float) -> dict[str, Any]:
    """The ranks' comparisons with the reference (worker.compare_updates), together, in both
    modes: passed, the worst gap, the first divergence (a rank's first tensor past the
    tolerance, or "ranks differ"), whether the ranks agree, the scenario's tolerance (the
    largest any rank raised it to)."""
    tolerance = max(s.get("tolerance", tolerance) for s in per_rank)
    diffs = [s["max_abs_diff"] for s in per_rank]
    agree = all(s["spread"] is not None and s["spread"] <= tolerance for s in per_rank)
    divergence = next(
        (
            {"rank": r, **s["first_divergence"]}
            for r, s in enumerate(per_rank)
            if s["first_divergence"]
        ),
        None,
    )
    if divergence is None and not agree:
        spread = max((s["spread"] for s in per_rank if s["spread"] is not None), default=None)
        divergence = {"rank": None, "tensor": None, "abs_diff": spread, "why": "ranks differ"}
    worst = None if None in diffs else max(diffs)
    return {
        "passed": divergence is None and worst is not None and worst <= tolerance and agree,
        "max_abs_diff": worst,
        "first_divergence": divergence,
        "ranks_agree": agree,
        "tolerance": tolerance,
    }
