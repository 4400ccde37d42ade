"""The run mode's schedule: the learning rate each of the loop's steps used, against the file's
make_scheduler stepped as the protocol says (once per update, over the true number of
updates) and as each known mistake steps it (core.schedules names them):

    per_microstep   scheduler.step() after every backward (rate c = K per update)
    prepared        stepped P times per call (Accelerate's prepared scheduler: c = P)
    short           built for E x floor(M / K) updates (len // K): no step for the tails
    skip_advances   stepped at a skipped N = 0 window too
    prepared_skip   both: P times per call, and called at a skipped window too (Accelerate's
                    prepared scheduler in a loop that runs every window)
    own_steps       once per optimizer step of the loop's own, whose windows are not the
                    reference's (a tail dropped or carried into the next epoch, litgpt's and
                    torchtune's loops): built for the run's updates, for len // K, or for
                    every window (`built_for` says which)

Each candidate runs the file's own make_scheduler on a fresh optimizer from make_optimizer, so
the comparison holds for any schedule the file defines. Without make_scheduler the intended
rate is the optimizer's own, constant.
"""

from __future__ import annotations

import math
from typing import Any

from pclab.experiments.trainer_check.pipeline import Scenario
from pclab.experiments.trainer_check.run_observe import Step
from pclab.experiments.trainer_check.run_reference import Update, Window, intended_scheduler
from pclab.experiments.trainer_check.trainer import Trainer

# How a loop may step the file's schedule (name -> (stepping, its length)): the stepping is
# "update" (once per update), "microstep" (after every backward; "ran": of the windows the loop
# ran), "prepared" (P times per update), "skip" (at an N = 0 window too) or "prepared_skip"
# (P times per update and per N = 0 window); the length is
# "true" (the run's updates), "len_k" (floor(M / K) an epoch), "windows" (every window) or
# "global" (ceil(P M / K) scheduler steps an epoch: sized from the global dataloader, as
# transformers' run_clm_no_trainer.py does before `prepare`, for a scheduler stepped P times).
MISTAKES = {
    "per_microstep": ("microstep", "true"),
    "per_microstep_ran": ("ran", "true"),
    "prepared": ("prepared", "true"),
    "short": ("update", "len_k"),
    "every_window": ("update", "windows"),
    "skip_advances": ("skip", "true"),
    "skip_advances_all": ("skip", "windows"),
    "prepared_skip": ("prepared_skip", "true"),
    "prepared_skip_all": ("prepared_skip", "windows"),  # Accelerate's count: every window
    "prepared_global": ("prepared", "global"),  # right without tails, P tails make one window
}
OWN_STEP_LENGTHS = ("true", "len_k", "windows")  # tried in this order for "own_steps"
RTOL = 1e-9  # rates are computed, not measured: equal to rounding


def length_of(run_windows: list[Window], length: str, k: int, world: int = 1) -> int:
    """The number of scheduler steps a schedule of `length` (MISTAKES) was built for: updates,
    but for "global" (P steps an update)."""
    epochs = max(w.epoch for w in run_windows) + 1
    if length == "global":
        return epochs * math.ceil(world * run_windows[-1].end / k)
    if length == "len_k":
        return epochs * (run_windows[-1].end // k)
    if length == "windows":
        return len(run_windows)
    return sum(1 for w in run_windows if w.num_valid_labels)


def _rates(
    trainer: Trainer, run_windows: list[Window], how: str, world: int, k: int
) -> list[float]:
    """Group 0's rate at each true update when the file's scheduler is stepped `how`."""
    stepping, length = MISTAKES.get(how, ("update", "true"))
    optimizer = trainer.make_optimizer(trainer.build())
    scheduler = intended_scheduler(trainer, optimizer, length_of(run_windows, length, k, world))
    rates: list[float] = []
    for w in run_windows:
        taken = bool(w.num_valid_labels)
        if stepping == "microstep" or (stepping == "ran" and taken):
            for j in range(w.microsteps):
                if j == w.microsteps - 1 and taken:
                    rates.append(float(optimizer.param_groups[0]["lr"]))
                    optimizer.step()
                scheduler.step()
            continue
        if taken:
            rates.append(float(optimizer.param_groups[0]["lr"]))
            optimizer.step()
        at_skip = stepping in ("skip", "prepared_skip")
        times = world if stepping == "prepared_skip" or (stepping == "prepared" and taken) else 1
        if taken or at_skip:
            for _ in range(times):
                scheduler.step()
    return rates


def _per_own_step(
    trainer: Trainer, steps: list[Step], run_windows: list[Window], k: int, world: int
) -> int | None:
    """The length a schedule was built for that, stepped once after each of the loop's own
    optimizer steps, gives the rate of every one of them; None when none of OWN_STEP_LENGTHS
    does. Only asked when no stepping over the reference's windows matched."""
    yours = [s.lrs[0] for s in steps]
    for length in OWN_STEP_LENGTHS:
        built = length_of(run_windows, length, k, world)
        optimizer = trainer.make_optimizer(trainer.build())
        scheduler = intended_scheduler(trainer, optimizer, built)
        rates: list[float] = []
        for _ in steps:
            rates.append(float(optimizer.param_groups[0]["lr"]))
            optimizer.step()
            scheduler.step()
        if _same(yours, rates):
            return built
    return None


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=RTOL, abs_tol=1e-15) for x, y in zip(a, b)
    )


def _window_of(step: Step, run_windows: list[Window]) -> Window | None:
    return next(
        (
            w
            for w in run_windows
            if w.first_forward < step.forwards <= w.first_forward + w.microsteps
        ),
        None,
    )


def judged(
    trainer: Trainer,
    steps: list[Step],
    updates: list[Update],
    run_windows: list[Window],
    scenario: Scenario,
) -> dict[str, Any]:
    """The rates yours and intended (one per update the reference took), which stepping of
    the file's schedule gives yours ("intended", a MISTAKES entry, or None: none of them),
    and the length that schedule was built for beside the run's true number of updates."""
    # the rate of each update the reference took: a step at a skipped window (N = 0, which a
    # framework cannot see coming and steps anyway) is not one, though its scheduler step counts
    taken = [w for w, u in zip(run_windows, updates) if u.lrs is not None]
    yours = [s.lrs[0] for s in steps if _window_of(s, run_windows) in taken] if steps else []
    intended = [u.lrs[0] for u in updates if u.lrs is not None]
    found: dict[str, Any] = {"yours": yours, "intended": intended, "matches": None}
    found["updates"] = length_of(run_windows, "true", scenario.accum)
    if _same(yours, intended):
        found["matches"] = "intended"
        return found
    if not trainer.has("make_scheduler"):
        return found
    world = len(scenario.grid)
    for how in MISTAKES:
        if _same(yours, _rates(trainer, run_windows, how, world, scenario.accum)):
            found["matches"] = how
            built = length_of(run_windows, MISTAKES[how][1], scenario.accum, world)
            found["built_for"] = built // world if MISTAKES[how][1] == "global" else built
            return found
    if steps and len(steps) != len(intended):  # the loop's windows are not the reference's
        own = _per_own_step(trainer, steps, run_windows, scenario.accum, world)
        if own is not None:
            found["matches"], found["built_for"] = "own_steps", own
    return found
