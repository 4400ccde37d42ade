"""The trainer check's report: per trainer file and scenario, did the step give the same
update as the single-process reference, on every rank, and which weight did each microbatch
get. This is the JSON `pclab check --json` prints (one trainer's entry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from pclab.core import update_weights
from pclab.experiments.trainer_check.coupled_report import build_check as coupled_check
from pclab.experiments.trainer_check.diagnoses import (
    Diagnosis,
    compared,
    counts_not_terms,
    dtype_after,
    extra_optimizer_state,
    no_evidence_run,
    no_evidence_scenario,
    non_finite,
    optimizer_not_stepped,
    uniform_scale,
)

# Per DTYPE: the relative gap within which a solved weight matches a scheme, and the relative
# residual above which the update is no weighted sum (a float64 step solves to ~1e-12).
SOLVE_RTOL = {"float64": 1e-6, "float32": 1e-4, "bfloat16": 5e-2}
NOT_A_WEIGHTED_SUM = SOLVE_RTOL["float64"]
STATUS_EXIT = {"same_update": 0, "different": 1, "no_evidence": 2, "unusable": 2}
RankScenario = dict[str, Any]  # one rank's JSON output for one scenario (worker.check_scenario)


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


def exit_code(check: Mapping[str, Any]) -> int:
    """The command's exit code for one trainer's check."""
    return STATUS_EXIT[check["status"]]


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
    together = compared(per_rank, tolerance)
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
    notes: list[str] = []
    if all(s["unchanged"] for s in per_rank) and first_rank["reference_changed"]:
        notes.append("no_step")
    if not agree:
        notes.append("ranks_differ")
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
        "verdict": _verdict(passed, n, evidence.evidence),
        "untold": list(evidence.untold),
        "tolerance": tolerance,
        "floor": first_rank.get("floor"),
        "clip_coefficient": first_rank.get("clip_coefficient"),
    }


def _verdict(passed: bool, n: int, evidence: bool) -> str:
    if not passed:
        return "different"  # a different update is evidence whatever the counts
    return "same_update" if evidence or n == 0 else "no_evidence"


def _scenario_diagnoses(
    s: ScenarioResult, per_rank: list[RankScenario], dtype: str, k: int, given: str | None
) -> list[Diagnosis]:
    """What this scenario's ranks saw, as diagnoses (diagnoses.py); `given`: what --counts
    counts (terms or labels), None for the standard scenarios."""
    found: list[Diagnosis] = []
    name = s["name"]
    failure = next((r["failure"] for r in per_rank if "failure" in r), None)
    if failure is not None:
        return [failure]
    if given is not None:
        found.extend(counts_not_terms(name, s["label_positions"], s["counts"], given))
    bad = next(((r, x["non_finite"]) for r, x in enumerate(per_rank) if x.get("non_finite")), None)
    if bad is not None:
        found.append(non_finite(name, bad[0], bad[1], s["counts"], s["ranks_agree"]))
    recast = next((r["dtype_after"] for r in per_rank if r.get("dtype_after")), None)
    if recast:
        found.append(dtype_after(name, recast[0], recast[1], dtype))
    extra = next(
        (r["extra_state"] for r in per_rank if (r.get("extra_state") or {}).get("keys")), None
    )
    if extra:
        n = sum(map(sum, s["counts"]))
        found.append(extra_optimizer_state(name, extra["keys"], extra["parameters"], n))
    small = s["residual"] is not None and s["residual"] <= SOLVE_RTOL[dtype]
    scale = update_weights.uniform_scale(s["weights"], SOLVE_RTOL[dtype]) if s["weights"] else None
    named = s["scheme"] in ("other", "double_scaled")  # other schemes' names say it better
    if not s["passed"] and small and scale is not None and named:
        placed = sum(map(sum, s["label_positions"]))
        ratio = sum(map(sum, s["counts"])) / placed if placed else 1.0
        found.append(uniform_scale(name, scale, s["residual"], k, ratio))
    if s["verdict"] == "no_evidence":
        found.append(no_evidence_scenario(name, s["untold"]))
    return found


def _not_stepped(
    scenarios: list[ScenarioResult], per_scenario: list[list[RankScenario]]
) -> list[Diagnosis]:
    """optimizer_not_stepped: scenarios with labels whose reference stepped, where no rank's
    train_step stepped the optimizer it was given."""
    idle = [
        (s, ranks)
        for s, ranks in zip(scenarios, per_scenario)
        if _labelled(s)
        and ranks[0].get("reference_changed")
        and all(r.get("stepped") == 0 for r in ranks)
    ]
    if not idle:
        return []
    changed = any(not r["unchanged"] for _, ranks in idle for r in ranks)
    return [optimizer_not_stepped([s["name"] for s, _ in idle], changed)]


def _labelled(s: ScenarioResult) -> bool:
    """N > 0: the scenario's microbatches hold at least one term."""
    return sum(map(sum, s["counts"])) > 0


def _status(scenarios: list[ScenarioResult], unusable: bool) -> str:
    if unusable:
        return "unusable"
    if any(s["verdict"] == "different" for s in scenarios):
        return "different"
    proven = [s for s in scenarios if s["verdict"] == "same_update" and _labelled(s)]
    return "same_update" if proven else "no_evidence"


def build_report(ranks: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """{"checks": [TrainerReport, ...]} from every rank's output (ValueError if they do not
    fit together)."""
    first = ranks[0]
    for key in ("world_size", "accum_steps", "tolerance"):
        if any(r[key] != first[key] for r in ranks):
            raise ValueError(f"ranks disagree on {key}")
    checks: list[TrainerReport] = []
    for i, check in enumerate(first["checks"]):
        names = [s["name"] for s in check["scenarios"]]
        if any([s["name"] for s in r["checks"][i]["scenarios"]] != names for r in ranks):
            raise ValueError("ranks ran different scenarios")
        dtype = check.get("dtype", "float64")
        per_scenario = [[r["checks"][i]["scenarios"][j] for r in ranks] for j in range(len(names))]
        if check.get("mode") == "coupled":  # issue 28: its own scenarios and solve
            checks.append(coupled_check(check, per_scenario, first))  # type: ignore[arg-type]
            continue
        shifts = any(
            "counts" in ranks_j[0] and ranks_j[0]["counts"] != ranks_j[0].get("label_positions")
            for ranks_j in per_scenario
        )
        scenarios = [
            _scenario(ranks_j, first["tolerance"], dtype, shifts) for ranks_j in per_scenario
        ]
        found: list[Diagnosis] = next(
            (
                r["checks"][i]["diagnoses"]
                for r in ranks
                if any(d["code"] != "elsewhere" for d in r["checks"][i].get("diagnoses", []))
            ),
            [],
        )
        unusable = bool(found)
        for s, ranks_j in zip(scenarios, per_scenario):
            given = check.get("counts_given")
            found = found + _scenario_diagnoses(s, ranks_j, dtype, first["accum_steps"], given)
        found += _not_stepped(scenarios, per_scenario)
        status = _status(scenarios, unusable)
        if status == "no_evidence":
            found.append(no_evidence_run(first["world_size"], first["accum_steps"]))
        checks.append(
            {
                "trainer": check["trainer"],
                "world_size": first["world_size"],
                "accum_steps": first["accum_steps"],
                "tolerance": first["tolerance"],
                "passed": status == "same_update",
                "status": status,
                "scenarios": scenarios,
                "skipped_scenarios": check["skipped"],
                "first_position_labelled": check.get("first_position_labelled", True),
                "dtype": dtype,
                "max_grad_norm": check.get("max_grad_norm"),
                "device": check.get("device", "cpu"),
                "counts_given": check.get("counts_given"),
                "diagnoses": found,
            }
        )
    return {"checks": checks}


def agrees(report: dict[str, Any]) -> bool:
    """Every checked trainer's verdict is the same update as the single-process reference
    (the experiment's default trainer is a correct one)."""
    return all(check["passed"] for check in report["checks"])
