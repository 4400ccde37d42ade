"""The coupled mode's report side (mode_protocols.ReportMode): per scenario, did the step give the
same update as the global-batch objective on every rank, and which objective did it optimise
(`scheme`, core.coupled_schemes). report.py assembles the trainer's report around it; one
trainer's JSON entry is the token mode's plus:

    mode              "coupled"
    scenarios[].sizes             P x K items per microbatch
    scenarios[].scheme            global_batch, rank_pool, microbatch_pool, microstep_pool,
                                  remote_detached, query_path_only, scaled, other (None: the
                                  global-batch gradient is 0)
    scenarios[].matching_schemes  every candidate this scenario cannot tell from it
    scenarios[].scale_groups      scaled: [{factor, parameters}], one per distinct factor
    scenarios[].residual          the named explanation's misfit (other: the best fit's)
    scenarios[].fits              each candidate's least-squares factor and residual
    scenarios[].left_out          candidates the file's callables could not compute, and why

Diagnoses (codes; the token mode's where they apply):
    objective_invalid    batch_loss / embed / embedding_loss returned no finite scalar or no
                         (queries, documents) pair: unusable, exit 2
    candidate_left_out   embedding_loss refused more documents than queries (a symmetric
                         CLIP loss without SYMMETRIC = True): remote_detached and
                         query_path_only cannot be named
    no_evidence          P x K = 1, or a wrong scheme gives this scenario's update too
    trainer_error, collective_mismatch, timeout   the scenario failed (failures.py: each
                         scenario runs alone, as in the token mode); its entry has
                         ranks_agree and scheme None; a gather of unequal items (--counts)
                         is a collective_mismatch with the scenario's `sizes`
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pclab.experiments.trainer_check.coupled_messages as coupled_messages
import pclab.experiments.trainer_check.judging as judging
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.judging import RunShape

SCHEME_EXPLANATIONS = {  # scheme -> one line: what the trainer's step optimised
    "global_batch": "the objective over every item of every rank and microstep: the same update",
    "rank_pool": "each rank's objective over its own items only, averaged over ranks (no "
    "gather: DDP, or plain BatchNorm statistics per rank)",
    "microbatch_pool": "each microbatch's own objective, averaged (accumulation without a "
    "gather: the negatives or statistics of one microbatch only)",
    "microstep_pool": "each microstep's objective over that microstep's items of every rank "
    "(a gather per microstep: accumulation does not enlarge the pool; GradCache does)",
    "remote_detached": "each rank's loss over its own queries (all K microbatches at once), "
    "with the other ranks' documents carrying no gradient (all_gather without putting the "
    "gradient back)",
    "query_path_only": "no document carries gradient, the rank's own included (a gather "
    "without gradient, local_loss=True)",
    "scaled": "the global-batch gradient times a factor: a x P compensation, or a gather "
    "whose backward sums the ranks' gradients",
    "other": "none of the named objectives, nor one of them scaled",
}
FIXES = {  # scheme -> the fix, naming the lab's pages that show it
    "rank_pool": "share the pool: gather every rank's items with their gradient, or "
    "SyncBatchNorm for batch statistics (pages 05 and 06)",
    "microbatch_pool": "accumulation does not enlarge the pool: cache the embeddings and take "
    "the loss over the whole step, every rank's items gathered with their gradient, as "
    "GradCache does (pages 04 and 05); for BatchNorm, put a rank's K microbatches through one "
    "forward (or accumulate the statistics yourself) and, with P > 1, use SyncBatchNorm so the "
    "statistics span every rank too",
    "microstep_pool": "a gather per microstep pools one microstep: cache the embeddings of "
    "every microstep and take one loss over them all, as GradCache does (page 04)",
    "remote_detached": "gather the documents with a gather whose backward returns each "
    "rank's gradient to its owner (pages 05 and 06)",
    "query_path_only": "let the documents carry gradient: your own rows, and the remote ones "
    "through a gradient-carrying gather (pages 05 and 06)",
    "scaled": "drop the extra factor: a gradient-carrying gather already returns every "
    "rank's share (page 06); with a detached gather fix the gather, not the scale",
    "other": "compare with the closest candidate below; the named objectives are on pages 04 to 06",
}


def scenario(
    per_rank: list[dict[str, Any]], tolerance: float, p: int, k: int, dtype: str
) -> dict[str, Any]:
    """One scenario's result from every rank's evidence (rank 0 carries the solve); a scenario
    some rank failed in (guard.py, relaunch.py: its diagnosis says how) is `different`, with
    nothing measured (ranks_agree None, as in the token mode)."""
    solved = per_rank[0]
    if any("failure" in s for s in per_rank):
        nothing = {"max_abs_diff": None, "first_divergence": None, "ranks_agree": None}
        return _result(
            solved, {"passed": False, **nothing, "tolerance": tolerance}, "different", [], []
        )
    compared = judging.compared(per_rank, tolerance)
    scheme = solved.get("scheme")
    # Imported here: core.coupled_objectives imports torch, which the pages must not pay for.
    from pclab.core.coupled_objectives import identical_objectives

    identical = next((g for g in identical_objectives(p, k) if "global_batch" in g), ())
    untold = [s for s in solved.get("untold", []) if s not in identical]
    evidence = p * k > 1 and scheme is not None and not untold
    passed = compared["passed"]
    if passed and dtype != "float64" and scheme != "global_batch":
        passed = False  # below the precision a wrong objective can hide; its solve cannot
    notes = judging.step_notes(per_rank, compared["ranks_agree"])
    if solved.get("not_finite"):
        notes.append("not_finite")
    verdict = "different" if not passed else "same_update" if evidence else "no_evidence"
    return _result(solved, {**compared, "passed": passed}, verdict, untold, notes)


def _result(
    solved: dict[str, Any],
    compared: dict[str, Any],
    verdict: str,
    untold: list[str],
    notes: list[str],
) -> dict[str, Any]:
    """A scenario's JSON entry: the comparison, rank 0's solve (absent: not measured)."""
    scheme = solved.get("scheme")
    explanation = SCHEME_EXPLANATIONS.get(scheme or "", "the global-batch gradient is 0")
    if "failure" in solved or compared["ranks_agree"] is None:
        explanation = "not measured: the scenario failed (its diagnosis says how)"
    return {
        "name": solved["name"],
        "sizes": solved["sizes"],
        **compared,
        "scheme": scheme,
        "explanation": explanation,
        "matching_schemes": solved.get("matching_schemes", []),
        "coinciding": solved.get("coinciding", []),
        "untold": untold,
        "scale": solved.get("scale"),
        "scale_groups": solved.get("scale_groups", []),
        "residual": solved.get("residual"),
        "fits": solved.get("fits", {}),
        "candidates": solved.get("candidates", []),
        "left_out": solved.get("left_out", {}),
        "notes": notes,
        "verdict": verdict,
        "floor": solved.get("floor"),
        "clip_coefficient": solved.get("clip_coefficient"),
    }


def judge(
    check: Mapping[str, Any], per_scenario: list[list[dict[str, Any]]], run: RunShape
) -> list[dict[str, Any]]:
    """Every scenario judged (`scenario`)."""
    p, k = run.world_size, run.accum_steps
    return [scenario(ranks, run.tolerance, p, k, run.dtype) for ranks in per_scenario]


def scenario_diagnoses(
    s: dict[str, Any], per_rank: list[dict[str, Any]], check: Mapping[str, Any], run: RunShape
) -> list[Diagnosis]:
    failure = judging.failure_of(per_rank)
    if failure is not None:  # the same diagnosis on every rank (guard.alone, relaunch.py)
        return [failure]
    found = judging.state_diagnoses(s["name"], per_rank, run.dtype, 1)
    if s["verdict"] == "no_evidence":
        found.append(coupled_messages.no_evidence_coupled_scenario(s["name"], s["untold"]))
    return found


def run_diagnoses(
    scenarios: list[dict[str, Any]], per_scenario: list[list[dict[str, Any]]]
) -> list[Diagnosis]:
    """Across scenarios: an optimizer never stepped; candidates the callables cannot compute."""
    found = judging.not_stepped(scenarios, per_scenario, proves)
    left: dict[str, str] = next((s["left_out"] for s in scenarios if s["left_out"]), {})
    if left:
        found.append(coupled_messages.candidate_left_out(left))
    return found


def proves(s: Mapping[str, Any]) -> bool:
    """Every coupled scenario holds items: any same_update one proves it."""
    return True


def no_evidence_run(world_size: int, accum: int) -> Diagnosis:
    return coupled_messages.no_evidence_coupled_run(world_size, accum)


def fields(check: Mapping[str, Any]) -> dict[str, Any]:
    """The coupled mode adds no field of its own beyond "mode" (report.py)."""
    return {}
