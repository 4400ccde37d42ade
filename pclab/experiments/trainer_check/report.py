"""The trainer check's report: per trainer file and scenario, did the step give the same
update as the single-process reference, on every rank, and which weight did each microbatch
get. This is the JSON `pclab check --json` prints (one trainer's entry)."""

from __future__ import annotations

from typing import TypedDict

from pclab.core import update_weights

NOT_A_WEIGHTED_SUM = 1e-6  # relative residual above which the update is no weighted sum


class ScenarioResult(TypedDict):
    name: str
    counts: list[list[int]]  # P x K: the terms token_losses returned per microbatch
    label_positions: list[list[int]]  # P x K: the counted labels the check put in each
    passed: bool
    max_abs_diff: float | None  # worst |user - reference| over every tensor and rank
    first_divergence: dict | None  # rank, tensor, abs_diff, why
    weights: list[list[float | None]] | None  # P x K: w x N, None where undefined
    residual: float | None
    scheme: str | None  # a named scheme, "other", or None at N = 0
    matching_schemes: list[str]  # every named scheme these counts cannot tell from it
    ranks_agree: bool
    notes: list[str]  # codes: no_step, ranks_differ, control, zero_must_skip, not_linear ...


class TrainerReport(TypedDict):
    trainer: str
    world_size: int
    accum_steps: int
    tolerance: float
    passed: bool
    scenarios: list[ScenarioResult]
    skipped_scenarios: list[dict]  # name, reason: scenarios this P x K cannot hold
    first_position_labelled: bool  # False: no counted label at a sequence's position 0


def _scenario(per_rank: list[dict], tolerance: float) -> ScenarioResult:
    first_rank = per_rank[0]
    diffs = [s["max_abs_diff"] for s in per_rank]
    spreads = [s["spread"] for s in per_rank]
    agree = all(x is not None and x <= tolerance for x in spreads)
    divergence = next(
        (
            {"rank": r, **s["first_divergence"]}
            for r, s in enumerate(per_rank)
            if s["first_divergence"]
        ),
        None,
    )
    if divergence is None and not agree:
        divergence = {
            "rank": None,
            "tensor": None,
            "abs_diff": max(spreads, default=None),
            "why": "ranks differ",
        }
    passed = divergence is None and None not in diffs and max(diffs) <= tolerance and agree
    counts = first_rank["counts"]
    n = sum(map(sum, counts))
    weights = first_rank["weights"]
    matching, scheme = [], ("other" if n else None)  # N = 0: no weight is defined
    if n and weights is not None:
        matching = list(update_weights.matching_schemes(weights, counts))
        scheme = update_weights.closest_scheme(weights, counts)
    notes = []
    if all(s["unchanged"] for s in per_rank) and first_rank["reference_changed"]:
        notes.append("no_step")
    if not agree:
        notes.append("ranks_differ")
    if n == 0 and not passed:
        notes.append("zero_must_skip")
    if first_rank["name"] == "equal_counts":
        notes.append("control")
    if n and weights is None:
        notes.append("not_finite")
    residual = first_rank["residual"]
    if residual is not None and residual > NOT_A_WEIGHTED_SUM:
        notes.append("not_linear")
    if first_rank["identifiable"] is False:
        notes.append("not_identifiable")
    return {
        "name": first_rank["name"],
        "counts": counts,
        "label_positions": first_rank.get("label_positions", counts),
        "passed": passed,
        "max_abs_diff": None if None in diffs else max(diffs),
        "first_divergence": divergence,
        "weights": weights,
        "residual": residual,
        "scheme": scheme,
        "matching_schemes": matching,
        "ranks_agree": agree,
        "notes": notes,
    }


def build_report(ranks: tuple[dict, ...]) -> dict:
    """{"checks": [TrainerReport, ...]} from every rank's output (ValueError if they do not
    fit together)."""
    first = ranks[0]
    for key in ("world_size", "accum_steps", "tolerance"):
        if any(r[key] != first[key] for r in ranks):
            raise ValueError(f"ranks disagree on {key}")
    checks = []
    for i, check in enumerate(first["checks"]):
        names = [s["name"] for s in check["scenarios"]]
        if any([s["name"] for s in r["checks"][i]["scenarios"]] != names for r in ranks):
            raise ValueError("ranks ran different scenarios")
        scenarios = [
            _scenario([r["checks"][i]["scenarios"][j] for r in ranks], first["tolerance"])
            for j in range(len(names))
        ]
        checks.append(
            {
                "trainer": check["trainer"],
                "world_size": first["world_size"],
                "accum_steps": first["accum_steps"],
                "tolerance": first["tolerance"],
                "passed": all(s["passed"] for s in scenarios),
                "scenarios": scenarios,
                "skipped_scenarios": check["skipped"],
                "first_position_labelled": check.get("first_position_labelled", True),
            }
        )
    return {"checks": checks}


def agrees(report: dict) -> bool:
    """Every checked trainer's verdict is the same update as the single-process reference
    (the experiment's default trainer is a correct one)."""
    return all(check["passed"] for check in report["checks"])
