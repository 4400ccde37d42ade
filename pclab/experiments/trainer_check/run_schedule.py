"""The run mode's schedule: the learning rate each of the loop's steps used, against the file's
make_scheduler stepped as the protocol says (once per update, over the true number of
updates) and as each known mistake steps it (core.schedules names them):

    per_microstep   scheduler.step() after every backward (rate c = K per update)
    prepared        stepped P times per call (Accelerate's prepared scheduler: c = P)
    short           built for E x floor(M / K) updates (len // K): no step for the tails
    skip_advances   stepped at a skipped N = 0 window too

Each candidate runs the file's own make_scheduler on a fresh optimizer from make_optimizer, so
the comparison holds for any schedule the file defines. Without make_scheduler the intended
rate is the optimizer's own, constant.
"""

from __future__ import annotations

import math
from typing import Any

from pclab.experiments.trainer_check.pipeline import Scenario, build, make_optimizer
from pclab.experiments.trainer_check.run_observe import Step
from pclab.experiments.trainer_check.run_reference import Update, Window, intended_scheduler
from pclab.experiments.trainer_check.trainer_file import Trainer

MISTAKES = ("per_microstep", "prepared", "short", "skip_advances")
RTOL = 1e-9  # rates are computed, not measured: equal to rounding


def _rates(
    trainer: Trainer, run_windows: list[Window], how: str, world: int, k: int
) -> list[float]:
    """Group 0's rate at each true update when the file's scheduler is stepped `how`."""
    model = build(trainer)
    optimizer = make_optimizer(trainer, model)
    updates = sum(1 for w in run_windows if w.num_valid_labels)
    epochs = max(w.epoch for w in run_windows) + 1
    m = run_windows[-1].end
    length = epochs * (m // k) if how == "short" else updates
    scheduler = intended_scheduler(trainer, optimizer, length)
    rates: list[float] = []
    for w in run_windows:
        taken = bool(w.num_valid_labels)
        if how == "per_microstep":
            for j in range(w.microsteps):
                if j == w.microsteps - 1 and taken:
                    rates.append(float(optimizer.param_groups[0]["lr"]))
                    optimizer.step()
                scheduler.step()
            continue
        if taken:
            rates.append(float(optimizer.param_groups[0]["lr"]))
            optimizer.step()
        if taken or how == "skip_advances":
            for _ in range(world if how == "prepared" and taken else 1):
                scheduler.step()
    return rates


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=RTOL, abs_tol=1e-15) for x, y in zip(a, b)
    )


def judged(
    trainer: Trainer,
    steps: list[Step],
    updates: list[Update],
    run_windows: list[Window],
    scenario: Scenario,
) -> dict[str, Any]:
    """The rates yours and intended (one per update the reference took), and which stepping
    of the file's schedule gives yours ("intended", a MISTAKES entry, or None: none of them)."""
    yours = [s.lrs[0] for s in steps]
    intended = [u.lrs[0] for u in updates if u.lrs is not None]
    found: dict[str, Any] = {"yours": yours, "intended": intended, "matches": None}
    if _same(yours, intended):
        found["matches"] = "intended"
        return found
    if not trainer.has("make_scheduler"):
        return found
    world = len(scenario.grid)
    for how in MISTAKES:
        if _same(yours, _rates(trainer, run_windows, how, world, scenario.accum)):
            found["matches"] = how
            break
    return found
