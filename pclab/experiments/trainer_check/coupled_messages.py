"""The coupled mode's own diagnoses (codes in codes.py, built through diagnoses._diagnosis like
every other): a candidate the file's callables cannot compute, and no evidence where every
candidate gives the scenario's update."""

from __future__ import annotations

from pclab.experiments.trainer_check.diagnoses import Diagnosis, _diagnosis


def candidate_left_out(left: dict[str, str]) -> Diagnosis:
    """The coupled candidates the file's callables could not compute ({scheme: why})."""
    message = (
        f"{', '.join(left)} left out: {next(iter(left.values())).rstrip('.')}. "
        "embedding_loss must "
        "accept more documents than queries (rows past the queries are extra negatives) "
        "for the check to name a gradient path; for a symmetric loss (CLIP) make it one "
        "direction and set SYMMETRIC = True"
    )
    return _diagnosis("candidate_left_out", message, schemes=list(left))


def no_evidence_coupled_scenario(scenario: str, untold: list[str]) -> Diagnosis:
    names = ", ".join(untold) or "every candidate (nothing is split)"
    message = (
        f"{scenario}: {names} gives this scenario's update too, so matching the "
        "global batch here is no evidence"
    )
    return _diagnosis("no_evidence", message, scenario, untold=untold)


def no_evidence_coupled_run(world_size: int, accum: int) -> Diagnosis:
    why = (
        "with P = 1 and K = 1 nothing is split"
        if world_size * accum == 1
        else "no scenario tells the global batch from every other objective"
    )
    rerun = "Run with more ranks or microsteps (--world-size 2 --accum 2, the default)"
    return _diagnosis("no_evidence", f"no evidence: {why}. {rerun}")
