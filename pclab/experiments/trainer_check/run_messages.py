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
        f"{scenario}: the tail window of epoch(s) {where} never stepped: a loop that steps "
        "only when (i + 1) % K == 0, or a loader that keeps only full batches of K, loses the "
        "last microbatches of an epoch whose length K does not divide (or carries them into "
        "the next epoch). Step at the epoch's end too"
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


def schedule_length(
    scenario: str, built: int, updates: int, global_sized: bool = False
) -> Diagnosis:
    """`global_sized`: the schedule was sized in scheduler steps from the global dataloader
    and stepped P times an update (transformers' run_clm_no_trainer.py)."""
    if global_sized:
        why = (
            "ceil(P x len(epoch) / K) scheduler steps an epoch, from the global dataloader, "
            "stepped P times an update: the P ranks' tails are one window, not P"
        )
    elif built < updates:
        why = "len(epoch) // K an epoch: each epoch's tail is an update too"
    else:
        why = "every window: a window with N = 0 takes no update"
    message = (
        f"{scenario}: the schedule was built for {built} updates where the run takes "
        f"{updates} ({why}), so it ends {'before' if built < updates else 'after'} the run "
        "does. Build it for the true number of updates: ceil(len(epoch) / K) an epoch, less "
        "the windows with N = 0"
    )
    return _diagnosis("schedule_length", message, scenario, built=built, updates=updates)


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


RESUME = {  # code -> (what the restarted run did, what to change)
    "not_resumable": (
        "the restarted run started over from the initial weights (or raised) though a "
        "checkpoint had been written",
        "at start, load the checkpoint found in checkpoint_dir and skip what it had done",
    ),
    "data_replayed": (
        "the restarted run ran microbatches it had already stepped (gpt-neox PR #308)",
        "save the position in the data with the checkpoint and skip to it on restart "
        "(Accelerate: skip_first_batches)",
    ),
    "data_skipped": (
        "a window with labels was stepped by neither run: the restart skipped past data it "
        "had not used (transformers PR #8624)",
        "count the position in updates and windows, not in optimizer steps x K",
    ),
    "scheduler_reset": (
        "the restarted run's learning rate is the schedule's first, not the one it had reached",
        "save and restore the scheduler's state_dict with the checkpoint",
    ),
    "optimizer_state_lost": (
        "the restarted run's optimizer restarted its step count (AdamW's bias correction is "
        "that of a first step again)",
        "save and restore the optimizer's whole state_dict, step counts included",
    ),
    "counter_reset": (
        "the restarted run stepped where the same loop never stopped does not, so its windows "
        "are cut at other places: its window counter restarted (transformers #22143), or, "
        "where it also replayed data, a restored counter ran over data served again from an "
        "earlier point",
        "restore the microstep counter and the position in the data together, or restart the "
        "window from its start",
    ),
    "window_gradient_lost": (
        "killed in the middle of a window (or of the loop's own: an epoch's tail carried "
        "over an epoch-end checkpoint, torchtune's), the restarted run went on from the kill, "
        "so that window's update lacks what was accumulated before it (OneTrainer PR #1465)",
        "checkpoint at update boundaries and restart a window from its first microbatch",
    ),
}


def resume_code(code: str, points: list[str], message: str = "") -> Diagnosis:
    """A resume check's finding, at the kill points (resume.kill_points) that showed it."""
    what, fix = RESUME[code]
    where = ", ".join(points)
    said = f" ({message})" if message and code == "not_resumable" else ""
    text = f"killed at {where}: {what}{said}. {fix[0].upper()}{fix[1:]}"
    return _diagnosis(code, text, None, points=points)


def no_evidence_resume() -> Diagnosis:
    """A run right everywhere else with a restart the check could not place (resume.py)."""
    return _diagnosis(
        "no_evidence",
        "no evidence: a restarted run's first microbatch is not one the check handed out (the "
        "loop builds its own inputs), so where it came back cannot be told and that restart "
        "was not judged. Hand the loop the check's tensors to check its resume",
        resume=True,
    )
