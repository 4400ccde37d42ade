"""The coupled run mode's report side (mode_protocols.ReportMode): the run mode's judgement
(run_report.judged and .diagnosed: updates compared window by window, steps per window, the
tail, the schedule) with each update named by the pool it optimised instead of by weights.
One trainer's JSON entry is the run mode's, with "mode": "coupled_run", "items" (ITEMS, or
null), and per scenario `sizes` ([rank][epoch][microbatch] items) in place of
label_positions; `counts` and each update's `num_valid_labels` count items. Each update adds:

    scheme      the pool the loop's step optimised (coupled_report.SCHEME_EXPLANATIONS:
                global_batch, the reference's, microstep_pool, rank_pool, ...; "scaled" or
                "other" where none fits as it is)
    scale       scaled: the factor on the global pool's gradient
    fitting     every candidate pool that explains the step, with its factor (a tail of one
                microstep is the same pool as a gather per microstep)
    untold      wrong pools this window cannot tell from the global one
    residual    the named explanation's misfit

A tail that steps at k'/K of its own pool's update is tail_window_scaled, as in the run mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pclab.experiments.trainer_check.coupled_messages as coupled_messages
import pclab.experiments.trainer_check.run_reading as run_reading
import pclab.experiments.trainer_check.run_report as run_report
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.judging import RankScenario, RunShape


def _attach_pools(updates: list[dict[str, Any]], solved: list[dict[str, Any]], rtol: float) -> None:
    """Each update's pool from rank 0's solve of the step that closed its window (the last
    such step, where several did)."""
    for entry in solved:
        at = entry.get("window")
        if at is None or at >= len(updates) or entry.get("scheme") is None:
            continue
        fits = entry.get("fits", {})
        fitting = {
            name: fit["factor"]
            for name, fit in fits.items()
            if fit["residual"] is not None and fit["residual"] <= rtol
        }
        updates[at] |= {
            "scheme": entry["scheme"],
            "scale": entry.get("scale"),
            "fitting": fitting,
            "untold": entry.get("untold", []),
            "residual": entry.get("residual"),
            "leak": None,  # a gradient carried over is not solved for here: "other" says it
        }


def _pool_claims(s: dict[str, Any], check: Mapping[str, Any], run: RunShape) -> list[str]:
    """What a scenario that matched shows: the pool (a window whose global pool no wrong pool
    gives), the tail, the schedule."""
    if run.world_size * run.accum_steps == 1:
        return []
    claims = []
    if any(u.get("scheme") == "global_batch" and not u.get("untold") for u in s["updates"]):
        claims.append("pool")
    if any(u["microsteps"] < run.accum_steps for u in s["updates"]):
        claims.append("tail")
    if check.get("scheduler"):
        claims.append("schedule")
    return claims


def _pool_scale(u: dict[str, Any], scheme: str) -> float | None:
    """The factor between the update and `scheme`'s pool at the update's own shape."""
    factor: float | None = (u.get("fitting") or {}).get(scheme)
    return factor


READING = run_reading.Reading(
    shape="sizes", attach=_attach_pools, claims=_pool_claims, scale=_pool_scale
)


def judge(
    check: Mapping[str, Any], per_scenario: list[list[RankScenario]], run: RunShape
) -> list[dict[str, Any]]:
    return run_report.judged(check, per_scenario, run, READING)


def scenario_diagnoses(
    s: dict[str, Any], per_rank: list[RankScenario], check: Mapping[str, Any], run: RunShape
) -> list[Diagnosis]:
    return run_report.diagnosed(s, per_rank, run, READING)


run_diagnoses = run_report.run_diagnoses
proves = run_report.proves


def no_evidence_run(world_size: int, accum: int) -> Diagnosis:
    return coupled_messages.no_evidence_coupled_run(world_size, accum)


def fields(check: Mapping[str, Any]) -> dict[str, Any]:
    """The run mode's fields and ITEMS."""
    return run_report.fields(check) | {"items": check.get("items")}
