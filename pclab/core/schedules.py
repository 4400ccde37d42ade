"""The learning-rate schedule across a run: the intended one, stepped once per update over the
true number of updates, against the ways loops step it wrongly.

An epoch of M microbatches a rank at K per update has W = ceil(M / K) windows; a run of E
epochs has E x W windows, of which those with N = 0 are skipped by everyone (no update), so
the true number of updates is U = E x W - skipped. The intended schedule is built for U
scheduler steps and stepped once after each update, so update u (from 0) uses the rate at
step s_u = u. The mistakes, each a different s_u or a different length:

    per_microstep   stepped after every backward, the optimizer stepping at a window's last
                    backward first: s_u = the backwards before update u's last one
    prepared        Accelerate's prepared scheduler steps P times per call: s_u = P u
    short           built for E x floor(M / K) updates (len // K): the tail has no step
    skip_advances   stepped at a skipped N = 0 window too: s_u = the windows before u

The rate is linear warm-up then linear decay to 0 (transformers'
get_linear_schedule_with_warmup):

    f(s) = s / warmup                          for s < warmup
         = max(0, (T - s) / (T - warmup))      after, T the schedule's length

    >>> prepared = lr_trajectory(RunShape(100, 1, 1, 2), "prepared", warmup=0)
    >>> round(1 - prepared.rates[10], 3)     # how far along a 100-update schedule at u = 10
    0.2
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pclab.core import validation as v

MISTAKES = ("intended", "per_microstep", "prepared", "short", "skip_advances")
MAX_WINDOWS = 10_000  # windows of one run on a page: a chart, not a real run


@dataclass(frozen=True)
class RunShape:
    """A run's windows: M microbatches a rank per epoch, K per update, E epochs, P ranks, and
    the global indices (from 0, over every epoch) of the windows with N = 0."""

    microbatches_per_epoch: int
    accum_steps: int
    epochs: int
    world_size: int
    skipped: tuple[int, ...] = ()

    def windows(self) -> list[int]:
        """Each window's microsteps, in run order (the tail of each epoch shorter)."""
        m, k = self.microbatches_per_epoch, self.accum_steps
        per_epoch = [min(k, m - start) for start in range(0, m, k)]
        return per_epoch * self.epochs


@dataclass(frozen=True)
class LrTrajectory:
    """The rate multiplier (of the base rate) each true update used, and where it ends."""

    mistake: str
    length: int  # T: the scheduler steps the schedule was built for
    steps: tuple[int, ...]  # s_u, the scheduler's step at each true update u
    rates: tuple[float, ...]  # f(s_u)
    ends_at: int | None  # the first update whose rate is 0 past the warm-up (None: never)


def rate(step: int, length: int, warmup: int) -> float:
    """f(s): linear warm-up over `warmup` steps, then linear decay to 0 at `length`."""
    if step < warmup:
        return step / warmup
    if length <= warmup:
        return 0.0
    return max(0.0, (length - step) / (length - warmup))


def _checked(shape: RunShape) -> tuple[int, int, int, int, frozenset[int]]:
    m = v.count(shape.microbatches_per_epoch, "microbatches_per_epoch", minimum=1)
    k = v.count(shape.accum_steps, "accum_steps", minimum=1)
    e = v.count(shape.epochs, "epochs", minimum=1)
    p = v.count(shape.world_size, "world_size", minimum=1)
    windows = e * math.ceil(m / k)
    if windows > MAX_WINDOWS:
        raise v.InvalidInput("epochs", e, "in_range", f"at most {MAX_WINDOWS} windows a run")
    skipped = frozenset(v.count(i, "skipped", minimum=0) for i in shape.skipped)
    if any(i >= windows for i in skipped):
        raise v.InvalidInput("skipped", max(skipped), "in_range", f"0..{windows - 1}")
    return m, k, e, p, skipped


def lr_trajectory(shape: RunShape, mistake: str, warmup: int = 0) -> LrTrajectory:
    """The rates a loop that steps its scheduler by `mistake` (MISTAKES) gives each true update.

    Args:
        shape: the run's windows (RunShape).
        mistake: "intended" or one of the mistakes in the module's docstring.
        warmup: warm-up steps of the schedule, >= 0.
    Returns:
        LrTrajectory: the steps s_u and rates f(s_u) of the U true updates, and the first
        update at which the rate has reached 0 after the warm-up.
    """
    m, k, e, p, skipped = _checked(shape)
    mistake = v.choice(mistake, "mistake", MISTAKES)
    warmup = v.count(warmup, "warmup", minimum=0)
    windows = shape.windows()
    true_updates = len(windows) - len(skipped)
    length = e * (m // k) if mistake == "short" else true_updates
    steps: list[int] = []
    microsteps_before = windows_before = 0
    for index, microsteps in enumerate(windows):
        if index not in skipped:
            u = len(steps)
            steps.append(
                {
                    "intended": u,
                    "short": u,
                    "per_microstep": microsteps_before + microsteps - 1,
                    "prepared": p * u,
                    "skip_advances": windows_before,
                }[mistake]
            )
        microsteps_before += microsteps
        windows_before += 1
    rates = tuple(rate(s, length, warmup) for s in steps)
    ends = next((u for u, (s, r) in enumerate(zip(steps, rates)) if s >= warmup and r == 0), None)
    return LrTrajectory(mistake, length, tuple(steps), rates, ends)
