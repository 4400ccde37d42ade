"""The token mode's report side (mode_protocols.ReportMode): per scenario, did the step give
the same update as the global token mean on every rank, and which weight did each microbatch
get, named as a scheme (core.update_weights). report.py assembles a trainer's report around
it; the TypedDicts below are its JSON (one trainer's entry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import pclab.experiments.trainer_check.judging as judging
from pclab.core import update_weights
from pclab.experiments.trainer_check.diagnoses import (
    Diagnosis,
    counts_not_terms,
    no_evidence_run,
    no_evidence_scenario,
    non_finite,
    uniform_scale,
)
from pclab.experiments.trainer_check.judging import SOLVE_RTOL, RankScenario, RunShape

__all__ = ["judge", "no_evidence_run", "proves", "run_diagnoses", "scenario_diagnoses"]


class ScenarioResult(TypedDict):
    name: str
    counts: list[list[int]]  # P x K: the terms token_losses returned per microbatch
    label_positions: list[list[int]]  # P x K: the counted labels the check put in each
    passed: bool
    max_abs_diff: float | None  # worst |user - reference| over every tensor and rank
    first_divergence: dict[str, Any] | None  # rank, tensor, abs_diff, why
    weights: list[list[float | None]] | None  # P x K: w x N, None where undefined
    residual: float | None
    scheme: str | None  # a named scheme, "other", or None at N = 0
    matching_schemes: list[str]  # every named scheme these counts cannot tell from it
    ranks_agree: bool | None  # None: the scenario failed (trainer_error, timeout, ...)
    notes: list[str]  # codes: no_step, ranks_differ, control, zero_must_skip, not_linear ...
    verdict: str  # same_update, different, or no_evidence (matched, but so would a wrong scheme)
    untold: list[str]  # the wrong schemes these counts give the global token mean's weights
    tolerance: float  # this scenario's: max(--tolerance, 10 x floor)
    floor: float | None  # the reference against itself, microbatches summed in reverse order
    clip_coefficient: float | None  # the reference's, with MAX_GRAD_NORM (weights are over it)


class TrainerReport(TypedDict):
    trainer: str
    world_size: int
    accum_steps: int
    tolerance: float
    passed: bool  # status == "same_update"
    status: str  # same_update (exit 0), different (1), no_evidence or unusable (2)
    scenarios: list[ScenarioResult]
    skipped_scenarios: list[dict[str, str]]  # name, reason: scenarios this P x K cannot hold
    first_position_labelled: bool  # False: no counted label at a sequence's position 0
    dtype: str  # the file's DTYPE
    max_grad_norm: float | None
    device: str  # cpu (Gloo) or cuda (NCCL)
    counts_given: str | None  # what --counts gave: "terms" or "labels" (--counts-labels)
    diagnoses: list[Diagnosis]  # code, message, scenario (or None), details: diagnoses.py


def _failed(per_rank: list[RankScenario], tolerance: float) -> ScenarioResult:
    """A scenario some rank failed in (guard.py; the diagnosis says how): `different`, with
    nothing measured."""
    positions: list[list[int]] = per_rank[0]["label_positions"]
    return {
        "name": per_rank[0]["name"],
        "counts": positions,
        "label_positions": positions,
        "passed": False,
        "max_abs_diff": None,
        "first_divergence": None,
        "weights": None,
        "residual": None,
        "scheme": None,
        "matching_schemes": [],
        "ranks_agree": None,
        "notes": [],
        "verdict": "different",
        "untold": [],
        "tolerance": tolerance,
        "floor": None,
        "clip_coefficient": None,
    }


def _scenario(
    per_rank: list[RankScenario], tolerance: float, dtype: str = "float64", shifts: bool = False
) -> ScenarioResult:
    """One scenario judged from every rank's evidence; `shifts`: the trainer's terms are fewer
    than the labels placed somewhere (a causal LM), so labels_before_shift is a candidate."""
    if any("failure" in s for s in per_rank):
        return _failed(per_rank, tolerance)
    first_rank = per_rank[0]
    rtol = SOLVE_RTOL[dtype]
    together = judging.compared(per_rank, tolerance)
    tolerance, agree, passed = together["tolerance"], together["ranks_agree"], together["passed"]
    counts: list[list[int]] = first_rank["counts"]
    labels = first_rank.get("label_positions", counts) if shifts else None
    n = sum(map(sum, counts))
    weights = first_rank["weights"]
    matching: list[str] = []
    scheme = "other" if n else None  # N = 0: no weight is defined
    if n and weights is not None:
        matching = list(update_weights.matching_schemes(weights, counts, rtol, labels))
        scheme = update_weights.closest_scheme(weights, counts, rtol, labels)
    if dtype != "float64" and passed and n and weights and "global_token" not in matching:
        passed = False  # below the precision a wrong scheme's update can hide; its weights can't
    evidence = update_weights.evidence(counts, labels=labels)
    notes = judging.step_notes(per_rank, agree)
    if n == 0 and not passed:
        notes.append("zero_must_skip")
    if first_rank["name"] == "equal_counts" and evidence.untold:  # only when it is true
        notes.append("control")
    if n and weights is None:
        notes.append("not_finite")
    residual = first_rank["residual"]
    if residual is not None and residual > rtol:
        notes.append("not_linear")
    if first_rank["identifiable"] is False:
        notes.append("not_identifiable")
    return {
        "name": first_rank["name"],
        "counts": counts,
        "label_positions": first_rank.get("label_positions", counts),
        "passed": passed,
        "max_abs_diff": together["max_abs_diff"],
        "first_divergence": together["first_divergence"],
        "weights": weights,
        "residual": residual,
        "scheme": scheme,
        "matching_schemes": matching,
        "ranks_agree": agree,
        "notes": notes,
        "verdict": _verdict(passed, n, evidence.evidence, "optimizer_state_unread" not in notes),
        "untold": list(evidence.untold),
        "tolerance": tolerance,
        "floor": first_rank.get("floor"),
        "clip_coefficient": first_rank.get("clip_coefficient"),
    }


def _verdict(passed: bool, n: int, evidence: bool, state_read: bool) -> str:
    if not passed:
        return "different"  # a different update is evidence whatever the counts
    if n == 0:  # nothing may change: shown only where every tensor that could was read
        return "same_update" if state_read else "no_evidence"
    return "same_update" if evidence else "no_evidence"


def scenario_diagnoses(
    s: ScenarioResult, per_rank: list[RankScenario], check: Mapping[str, Any], run: RunShape
) -> list[Diagnosis]:
    """What this scenario's ranks saw, as diagnoses (diagnoses.py); --counts that a
    microbatch could not hold as given first."""
    failure = judging.failure_of(per_rank)
    if failure is not None:
        return [failure]
    found: list[Diagnosis] = []
    name, dtype, given = s["name"], run.dtype, check.get("counts_given")
    if given is not None:
        found.extend(counts_not_terms(name, s["label_positions"], s["counts"], given))
    bad = next(((r, x["non_finite"]) for r, x in enumerate(per_rank) if x.get("non_finite")), None)
    if bad is not None:
        found.append(non_finite(name, bad[0], bad[1], s["counts"], s["ranks_agree"]))
    found += judging.state_diagnoses(name, per_rank, dtype, sum(map(sum, s["counts"])))
    small = s["residual"] is not None and s["residual"] <= SOLVE_RTOL[dtype]
    scale = update_weights.uniform_scale(s["weights"], SOLVE_RTOL[dtype]) if s["weights"] else None
    named = s["scheme"] in ("other", "double_scaled")  # other schemes' names say it better
    if not s["passed"] and small and scale is not None and named:
        placed = sum(map(sum, s["label_positions"]))
        ratio = sum(map(sum, s["counts"])) / placed if placed else 1.0
        found.append(uniform_scale(name, scale, s["residual"], run.accum_steps, ratio))
    if s["verdict"] == "no_evidence":
        unread = "optimizer_state_unread" in s["notes"] and not proves(s)
        found.append(no_evidence_scenario(name, s["untold"], state_unread=unread))
    return found


def proves(s: Mapping[str, Any]) -> bool:
    """N > 0: only a scenario whose microbatches hold terms proves the same update."""
    return sum(map(sum, s["counts"])) > 0


def run_diagnoses(
    scenarios: list[dict[str, Any]], per_scenario: list[list[RankScenario]]
) -> list[Diagnosis]:
    """optimizer_not_stepped, over the scenarios with labels."""
    return judging.not_stepped(scenarios, per_scenario, proves)


def judge(
    check: Mapping[str, Any], per_scenario: list[list[RankScenario]], run: RunShape
) -> list[ScenarioResult]:
    """Every scenario judged; labels_before_shift is a candidate when the trainer's terms are
    fewer than the labels placed in some scenario (a causal LM)."""
    shifts = any(
        "counts" in ranks[0] and ranks[0]["counts"] != ranks[0].get("label_positions")
        for ranks in per_scenario
    )
    return [_scenario(ranks, run.tolerance, run.dtype, shifts) for ranks in per_scenario]


def fields(check: Mapping[str, Any]) -> dict[str, Any]:
    """The token mode's own fields of a trainer's report."""
    return {
        "first_position_labelled": check.get("first_position_labelled", True),
        "counts_given": check.get("counts_given"),
    }
