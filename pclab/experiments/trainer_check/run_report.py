"""The run mode's report side (mode_protocols.ReportMode): per scenario, did the loop's run give the
same updates as the one-process run, update by update, and what did each update optimise.
One trainer's JSON entry is the token mode's, with "mode": "run", plus per scenario:

    updates[]   one per window of the run: epoch, window, microsteps, num_valid_labels,
                skipped (N = 0), lr_intended, lr_yours, optimizer_steps (the loop's, in this
                window), max_abs_diff (its update against the reference's), scheme and
                weights (the window's weight x N, P x k', the loop's rate divided out), leak
                (the largest |weight x N| on an earlier window's microbatch), residual
    steps, reference_steps   optimizer steps the loop took, the reference's updates
    schedule    the rates yours and intended, and which stepping of the schedule gives yours
    claims      what this scenario can support: normalisation, tail, schedule, skip
    first_divergence         the first update past the tolerance: update, epoch, window, ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pclab.experiments.trainer_check.diagnoses as diagnoses
import pclab.experiments.trainer_check.judging as judging
import pclab.experiments.trainer_check.run_messages as run_messages
import pclab.experiments.trainer_check.run_reading as run_reading
from pclab.core import update_weights
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.judging import SOLVE_RTOL, RankScenario, RunShape
from pclab.experiments.trainer_check.run_reading import Reading


def _attach_solve(updates: list[dict[str, Any]], solved: list[dict[str, Any]], rtol: float) -> None:
    """Each update's scheme, weights, leak and residual from rank 0's solve of the step that
    closed its window (the last such step, where several did)."""
    for entry in solved:
        at = entry.get("window")
        if at is None or at >= len(updates) or entry.get("weights") is None:
            continue
        if updates[at]["skipped"]:  # a step at N = 0 is no update: nothing to name
            continue
        if entry.get("identifiable") is False:  # no weight known: no scheme, no leak
            updates[at] |= {"scheme": None, "weights": None, "leak": None}
            continue
        weights, counts = entry["weights"], entry["counts"]
        fits = entry["residual"] is not None and entry["residual"] <= rtol
        scheme = "other"
        if fits and sum(map(sum, counts)):
            scheme = update_weights.closest_scheme(weights, counts, rtol)
        updates[at] |= {
            "scheme": scheme,
            "weights": weights,
            "counts": counts,
            # a step no weighted sum of gradients explains (a loop that stepped another rule
            # than the SGD it was handed) has no weight on an earlier microbatch to claim
            "leak": entry["leak"] if fits else None,
            "residual": entry["residual"],
        }


def _claims(s: dict[str, Any], check: Mapping[str, Any], run: RunShape) -> list[str]:
    """What a scenario that matched would show: the normalisation (a window whose counts tell
    the global token mean from every wrong scheme), the tail, the schedule, a skipped window."""
    if run.world_size * run.accum_steps == 1:
        return []  # nothing split, no tail: every loop is the same run
    claims = []
    told = any(
        update_weights.evidence(u["counts"]).evidence for u in s["updates"] if u.get("counts")
    )
    if told:
        claims.append("normalisation")
    if any(u["microsteps"] < run.accum_steps and u["num_valid_labels"] for u in s["updates"]):
        claims.append("tail")
    if check.get("scheduler"):
        claims.append("schedule")
    if any(u["skipped"] for u in s["updates"]):
        claims.append("skip")
    return claims


def _scenario(
    per_rank: list[RankScenario], check: Mapping[str, Any], run: RunShape, reading: Reading
) -> dict[str, Any]:
    first = per_rank[0]
    named = {"name": first["name"], reading.shape: first[reading.shape]}
    if judging.failure_of(per_rank) is not None:
        return {
            **named,
            "passed": False,
            "verdict": "different",
            "ranks_agree": None,
            "updates": [],
            "claims": [],
            "notes": [],
            "max_abs_diff": None,
            "first_divergence": None,
            "tolerance": run.tolerance,
            "floor": None,
        }
    tolerance = max(r["tolerance"] for r in per_rank)
    updates = [dict(u) for u in first["updates"]]
    for i, u in enumerate(updates):
        gaps = [r["updates"][i]["max_abs_diff"] for r in per_rank]
        u["max_abs_diff"] = None if None in gaps else max(gaps)
        u["first_divergence"] = next(
            (
                {"rank": r, **x["updates"][i]["first_divergence"]}
                for r, x in enumerate(per_rank)
                if x["updates"][i]["first_divergence"]
            ),
            None,
        )
    rtol = SOLVE_RTOL[run.dtype]
    reading.attach(updates, first.get("solved", []), rtol)
    agree = all(r["spread"] is not None and r["spread"] <= tolerance for r in per_rank)
    agree = agree and all(r["steps_agree"] for r in per_rank)
    divergent = next(
        (
            {"update": i, "epoch": u["epoch"], "window": u["window"], **u["first_divergence"]}
            for i, u in enumerate(updates)
            if u["first_divergence"]
        ),
        None,
    )
    if divergent is None and first["unplaced"]:  # a step before any microbatch ran
        divergent = {"update": None, "tensor": None, "abs_diff": None, "why": "unplaced step"}
    gaps = [r["max_abs_diff"] for r in per_rank]
    worst = None if None in gaps else max(gaps)
    passed = divergent is None and agree and worst is not None and worst <= tolerance
    s = {
        **named,
        "counts": first["counts"],
        "updates": updates,
        "steps": first["steps"],
        "reference_steps": first["reference_steps"],
        "schedule": first["schedule"],
        "passed": passed,
        "max_abs_diff": worst,
        "first_divergence": divergent,
        "ranks_agree": agree,
        "tolerance": tolerance,
        "floor": first.get("floor"),
    }
    s["claims"] = reading.claims(s, check, run)
    s["notes"] = [] if agree else ["ranks_differ"]
    if any(e.get("identifiable") is False for e in first.get("solved", [])):
        s["notes"].append("not_identifiable")  # no weight, no leak: the model is too small
    if not all(r.get("optimizer_state_read", True) for r in per_rank):
        s["notes"].append("optimizer_state_unread")  # a wrapper's: parameters compared alone
    s["verdict"] = "different" if not passed else "same_update" if s["claims"] else "no_evidence"
    return s


def judge(
    check: Mapping[str, Any], per_scenario: list[list[RankScenario]], run: RunShape
) -> list[dict[str, Any]]:
    """Every scenario judged (`_scenario`)."""
    return judged(check, per_scenario, run, READING)


def judged(
    check: Mapping[str, Any],
    per_scenario: list[list[RankScenario]],
    run: RunShape,
    reading: Reading,
) -> list[dict[str, Any]]:
    """Every scenario judged, its evidence read as `reading` says."""
    return [_scenario(ranks, check, run, reading) for ranks in per_scenario]


def _schedule(s: dict[str, Any], k: int, world: int) -> list[Diagnosis]:
    """The schedule's diagnosis, from which stepping of the file's schedule gave its rates."""
    schedule = s.get("schedule") or {}
    how, name = schedule.get("matches"), s["name"]
    if how in ("per_microstep", "per_microstep_ran"):
        return [run_messages.scheduler_rate(name, "per_microstep", k)]
    if how == "prepared":
        return [run_messages.scheduler_rate(name, how, world)]
    if how == "own_steps" and schedule["built_for"] == schedule["updates"]:
        return []  # the intended schedule, stepped per own step: the windows' codes say it
    if how in ("short", "every_window", "prepared_global", "own_steps"):
        built, updates = schedule["built_for"], schedule["updates"]
        global_sized = how == "prepared_global"
        return [run_messages.schedule_length(name, built, updates, global_sized)]
    if how in ("skip_advances", "skip_advances_all"):
        return [run_messages.scheduler_on_skip(name)]
    if how in ("prepared_skip", "prepared_skip_all"):
        return [
            run_messages.scheduler_rate(name, "prepared", world),
            run_messages.scheduler_on_skip(name),
        ]
    return []


def scenario_diagnoses(
    s: dict[str, Any], per_rank: list[RankScenario], check: Mapping[str, Any], run: RunShape
) -> list[Diagnosis]:
    """The run's diagnoses for one scenario, each once, in the order a reader fixes them."""
    return diagnosed(s, per_rank, run, READING)


def diagnosed(
    s: dict[str, Any], per_rank: list[RankScenario], run: RunShape, reading: Reading
) -> list[Diagnosis]:
    """scenario_diagnoses, its evidence read as `reading` says."""
    failure = judging.failure_of(per_rank)
    if failure is not None:
        return [failure]
    name, k = s["name"], run.accum_steps
    found: list[Diagnosis] = []
    bad = next(((r, x["non_finite"]) for r, x in enumerate(per_rank) if x.get("non_finite")), None)
    if bad is not None:
        counts = [[sum(e) for e in row] for row in s["counts"]]
        found.append(diagnoses.non_finite(name, bad[0], bad[1], counts, s["ranks_agree"]))
    found += judging.state_diagnoses(name, per_rank, run.dtype, 1)
    labelled = [u for u in s["updates"] if u["num_valid_labels"]]
    dropped = [u for u in labelled if u["microsteps"] < k and not u["optimizer_steps"]]
    if dropped:
        found.append(run_messages.tail_window_dropped(name, [u["epoch"] for u in dropped]))
    many = sorted({u["optimizer_steps"] for u in labelled if u["optimizer_steps"] > 1})
    idle = [u for u in labelled if u["microsteps"] == k and not u["optimizer_steps"]]
    if many or idle:
        found.append(run_messages.steps_per_window(name, many[-1] if many else 0, k))
    # a weight x N on an earlier window's microbatch is carried over only past the precision
    # the weights are solved to in DTYPE (float32's solve leaves ~1e-6 on every weight)
    leaked = [u for u in s["updates"] if (u.get("leak") or 0) > SOLVE_RTOL[run.dtype]]
    if leaked:
        worst = max(leaked, key=lambda u: u["leak"])
        found.append(
            run_messages.gradient_leak(name, worst["epoch"], worst["window"], worst["leak"])
        )
    found += run_reading.tail_scaled(s, k, reading)
    found += _schedule(s, k, run.world_size)
    if s["verdict"] == "no_evidence":
        found.append(run_messages.no_evidence_run_scenario(name))
    return found


def _tail_scale(u: dict[str, Any], scheme: str) -> float | None:
    """The one factor c between the tail's weights and `scheme`'s at the tail's own shape."""
    if scheme == "other" or not u.get("weights"):
        return None
    want = update_weights.scheme_weights_times_n(u["counts"], scheme)
    ratios = [
        g / w
        for got, wanted in zip(u["weights"], want)
        for g, w in zip(got, wanted)
        if g is not None and w
    ]
    if not ratios or max(ratios) - min(ratios) > 1e-6 * max(abs(x) for x in ratios):
        return None
    mean: float = sum(ratios) / len(ratios)
    return mean


READING = Reading(shape="label_positions", attach=_attach_solve, claims=_claims, scale=_tail_scale)


def run_diagnoses(
    scenarios: list[dict[str, Any]], per_scenario: list[list[RankScenario]]
) -> list[Diagnosis]:
    """optimizer_not_stepped: the loop took no step in any scenario the reference stepped."""
    idle = [
        s["name"]
        for s, ranks in zip(scenarios, per_scenario)
        if s.get("reference_steps") and all(r.get("steps") == 0 for r in ranks)
    ]
    return [diagnoses.optimizer_not_stepped(idle, False)] if idle else []


def proves(s: Mapping[str, Any]) -> bool:
    """A same_update scenario with something it can support (claims) proves the run."""
    return bool(s.get("claims"))


def no_evidence_run(world_size: int, accum: int) -> Diagnosis:
    return diagnoses.no_evidence_run(world_size, accum)


def fields(check: Mapping[str, Any]) -> dict[str, Any]:
    """The run mode's own fields of a trainer's report."""
    return {"epochs": check.get("epochs"), "scheduler": check.get("scheduler", False)}
