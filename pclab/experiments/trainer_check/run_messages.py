"""The run mode's diagnoses (codes in codes.py, built through diagnoses._diagnosis like every
other): what a loop over epochs gets wrong that one update cannot show. Each message ends
with what to change."""

from __future__ import annotations

from pclab.experiments.trainer_check.diagnoses import Diagnosis, _diagnosis

SCHEME_WORDS = {
    "global_token": "the global token mean",
    "microbatch_mean": "microbatch means",
    "replica_mean": "DDP's mean of local means",
    "double_scaled": "a double ÷K",
    "unnormalised_sum": "an unnormalised sum",
}


def tail_window_scaled(
    scenario: str, scale: float, microsteps: int, k: int, scheme: str
) -> Diagnosis:
    words = SCHEME_WORDS.get(scheme, scheme)
    message = (
        f"{scenario}: the epoch's tail of {microsteps} microbatch(es) is stepped at "
        f"{scale:.4g} = {microsteps}/{k} of what this loop gives a full window of them "
        f"({words}): it is divided by K = {k}, not by the window's own count. Divide each "
        "window by its global count N (or by its own number of microbatches), tail included"
    )
    return _diagnosis(
        "tail_window_scaled", message, scenario, scale=scale, microsteps=microsteps, scheme=scheme
    )


def tail_window_dropped(scenario: str, epochs: list[int]) -> Diagnosis:
    where = ", ".join(map(str, epochs))
    message = (
        f"{scenario}: the tail window of epoch(s) {where} never stepped: the loop steps only "
        "when (i + 1) % K == 0, so an epoch whose length K does not divide loses its last "
        "microbatches (or carries them into the next epoch). Step at the epoch's end too"
    )
    return _diagnosis("tail_window_dropped", message, scenario, epochs=epochs)


def gradient_leak(scenario: str, epoch: int, window: int, leak: float) -> Diagnosis:
    message = (
        f"{scenario}: the update of epoch {epoch}, window {window} carries an earlier window's "
        f"gradient (weight x N up to {leak:.3g} on microbatches it does not hold): a missing "
        "or misplaced zero_grad, or a tail that never stepped. Zero the gradients once per "
        "update, right after optimizer.step() (or before the window's first backward)"
    )
    return _diagnosis("gradient_leak", message, scenario, epoch=epoch, window=window, leak=leak)


def steps_per_window(scenario: str, steps: int, k: int) -> Diagnosis:
    how = (
        f"{steps} optimizer steps in one window of K = {k}: the loop steps every microbatch"
        if steps > 1
        else f"a full window of K = {k} microbatches with labels took no optimizer step"
    )
    message = (
        f"{scenario}: {how}. Step once per window, after its last backward (one update per "
        "K microbatches, and one for the tail)"
    )
    return _diagnosis("steps_per_window", message, scenario, steps=steps)


def scheduler_rate(scenario: str, how: str, rate: int) -> Diagnosis:
    why = (
        "scheduler.step() runs after every backward, not after every update"
        if how == "per_microstep"
        else "a prepared scheduler (Accelerate's) steps once per process on every call"
    )
    message = (
        f"{scenario}: the learning rate at update u is the intended schedule's at about "
        f"{rate} x u: {why}, so the schedule ends {rate} times too early. Step the scheduler "
        "once per update (with Accelerate: do not prepare it, or build it for P times the "
        "updates)"
    )
    return _diagnosis("scheduler_rate", message, scenario, how=how, rate=rate)


def schedule_length(scenario: str) -> Diagnosis:
    message = (
        f"{scenario}: the schedule was built for len(epoch) // K updates an epoch, but each "
        "epoch's tail is an update too, so it ends before the run does. Build it for "
        "ceil(len(epoch) / K) updates an epoch (less the windows with N = 0)"
    )
    return _diagnosis("schedule_length", message, scenario)


def scheduler_on_skip(scenario: str) -> Diagnosis:
    message = (
        f"{scenario}: the scheduler stepped at a window with no labels (N = 0), where no "
        "update was taken, so it runs ahead of the updates. Skip the scheduler step with "
        "the optimizer step"
    )
    return _diagnosis("scheduler_on_skip", message, scenario)


def no_evidence_run_scenario(scenario: str) -> Diagnosis:
    message = (
        f"{scenario}: nothing here tells a wrong loop from the right one (P x K = 1: no "
        "window is split and no epoch has a tail), so matching the reference is no evidence"
    )
    return _diagnosis("no_evidence", message, scenario, untold=[])
