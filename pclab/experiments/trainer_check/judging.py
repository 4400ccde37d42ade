"""What every mode's report shares: judging the ranks' evidence of one scenario together, the
diagnoses any mode's step can earn, and a file's status (no torch: the command imports it).

A mode's report side (`<mode>_report.py`, see modes.py) builds its scenario results and its
own diagnoses with these; report.py assembles the trainer's report around them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pclab.experiments.trainer_check.diagnoses as diagnoses
from pclab.experiments.trainer_check.diagnoses import Diagnosis

# Per DTYPE: the relative gap within which a solved weight matches a scheme, and the relative
# residual above which the update is no weighted sum (a float64 step solves to ~1e-12).
SOLVE_RTOL = {"float64": 1e-6, "float32": 1e-4, "bfloat16": 5e-2}
STATUS_EXIT = {"same_update": 0, "different": 1, "no_evidence": 2, "unusable": 2}
RankScenario = dict[str, Any]  # one rank's entry for one scenario (pipeline.check_scenario)


@dataclass(frozen=True)
class RunShape:
    """What every scenario of one trainer's report is judged at."""

    world_size: int
    accum_steps: int
    tolerance: float  # --tolerance (a scenario raises it to 10 x its reference's floor)
    dtype: str  # the file's DTYPE


def exit_code(check: Mapping[str, Any]) -> int:
    """The command's exit code for one trainer's check."""
    return STATUS_EXIT[check["status"]]


def compared(per_rank: list[RankScenario], tolerance: float) -> dict[str, Any]:
    """The ranks' comparisons with the reference (pipeline.compare_updates), together:
    passed, the worst gap, the first divergence (a rank's first tensor past the tolerance,
    or "ranks differ"), whether the ranks agree, the scenario's tolerance (the largest any
    rank raised it to)."""
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


def failure_of(per_rank: list[RankScenario]) -> Diagnosis | None:
    """The diagnosis of a scenario some rank failed in (guard.py, relaunch.py: the same on
    every rank that has one), else None."""
    return next((r["failure"] for r in per_rank if "failure" in r), None)


def step_notes(per_rank: list[RankScenario], agree: bool | None) -> list[str]:
    """The notes any mode's scenario earns from the step itself: no_step (the reference
    moved, the user's step did not), ranks_differ, and optimizer_state_unread (a wrapper's
    optimizer stepped flat copies of the parameters: the parameters were compared alone)."""
    notes = []
    if all(s["unchanged"] for s in per_rank) and per_rank[0]["reference_changed"]:
        notes.append("no_step")
    if not agree:
        notes.append("ranks_differ")
    if not all(s.get("state_read", True) for s in per_rank):
        notes.append("optimizer_state_unread")
    return notes


def state_diagnoses(name: str, per_rank: list[RankScenario], dtype: str, n: int) -> list[Diagnosis]:
    """What any mode's step can leave behind: parameters no longer in DTYPE; optimizer state
    the reference has none of (`n`: the scenario's N, 0 where the reference does not step)."""
    found: list[Diagnosis] = []
    recast = next((r["dtype_after"] for r in per_rank if r.get("dtype_after")), None)
    if recast:
        found.append(diagnoses.dtype_after(name, recast[0], recast[1], dtype))
    extra = next(
        (r["extra_state"] for r in per_rank if (r.get("extra_state") or {}).get("keys")), None
    )
    if extra:
        found.append(diagnoses.extra_optimizer_state(name, extra["keys"], extra["parameters"], n))
    return found


def not_stepped(
    scenarios: list[dict[str, Any]],
    per_scenario: list[list[RankScenario]],
    counts: Callable[[dict[str, Any]], bool],
) -> list[Diagnosis]:
    """optimizer_not_stepped: scenarios that `counts` (N > 0, say) whose reference stepped,
    where no rank's train_step stepped the optimizer it was given."""
    idle = [
        (s, ranks)
        for s, ranks in zip(scenarios, per_scenario)
        if counts(s)
        and ranks[0].get("reference_changed")
        and all(r.get("stepped") == 0 for r in ranks)
    ]
    if not idle:
        return []
    changed = any(not r["unchanged"] for _, ranks in idle for r in ranks)
    return [diagnoses.optimizer_not_stepped([s["name"] for s, _ in idle], changed)]


def status(
    scenarios: list[dict[str, Any]], unusable: bool, proves: Callable[[dict[str, Any]], bool]
) -> str:
    """unusable, different (any scenario), same_update (a scenario that `proves` it), or
    no_evidence."""
    if unusable:
        return "unusable"
    if any(s["verdict"] == "different" for s in scenarios):
        return "different"
    proven = [s for s in scenarios if s["verdict"] == "same_update" and proves(s)]
    return "same_update" if proven else "no_evidence"


def preflight_diagnoses(ranks: tuple[dict[str, Any], ...], i: int) -> list[Diagnosis]:
    """The i-th file's preflight diagnoses from the rank that found them (every other rank
    says only "elsewhere"): they make the file unusable."""
    return next(
        (
            r["checks"][i]["diagnoses"]
            for r in ranks
            if any(d["code"] != "elsewhere" for d in r["checks"][i].get("diagnoses", []))
        ),
        [],
    )
