"""The windows of an epoch: where gradient accumulation cuts a rank's microbatches into
updates, and how much of its gradient each update really carries under a given loop.

A rank holds M microbatches an epoch and accumulates K of them per update, so an epoch has
ceil(M / K) windows; when K does not divide M the last one is a *tail* of k' = M mod K
microbatches (the same on every rank, as DistributedSampler with drop_last=False gives).
Each window w is one update; its global count is

    N_w = sum over ranks r and the window's microsteps k of n_rk,

and the single-process run steps on the global token mean over those N_w terms (no step at
N_w = 0). A loop's *weight sum* is the sum over the window's terms of the weight its
gradient got (DDP averages the P ranks' gradients):

    global_tokens   sum_rk (1 / N_w) x n_rk                   = 1
    window_count    sum_rk (1 / (P k' n_rk)) x n_rk           = 1   (undefined if an n_rk = 0)
    accum_steps     sum_rk (1 / (P K n_rk)) x n_rk            = k' / K

so a loop that divides every microbatch's mean by K (nanoGPT, Lightning #19987) steps its
tail at k'/K of its size: 0.5 for a tail of 1 microbatch at K = 2.

    >>> [u.weight_sum for u in epoch_updates([[3, 5, 2, 4, 6]], 2, "accum_steps")]
    [1.0, 1.0, 0.5]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pclab.core import validation as v

LOOPS = ("global_tokens", "window_count", "accum_steps")
CORRECT_LOOP = "global_tokens"
MAX_MICROBATCHES = 64  # per rank and epoch: a page's table, not a real epoch


@dataclass(frozen=True)
class Window:
    """One window of an epoch: microbatches start .. start + microsteps - 1 of every rank."""

    index: int  # within the epoch, from 0
    start: int  # the first microbatch's index in the epoch
    microsteps: int  # k': K, or fewer for the tail
    num_valid_labels: int  # N_w over every rank's microbatches of the window
    is_tail: bool  # fewer microbatches than K


@dataclass(frozen=True)
class WindowUpdate:
    """What one loop makes of one window, beside the single-process run."""

    window: Window
    weight_sum: float | None  # the loop's; None: undefined (N_w = 0, or a mean over nothing)
    correct_weight_sum: float | None  # the single-process run's: 1, None at N_w = 0 (skipped)
    ratio: float | None  # weight_sum / correct_weight_sum; None where either is undefined


def epoch_windows(num_microbatches: int, accum_steps: int) -> tuple[tuple[int, int], ...]:
    """(start, microsteps) of each window: ceil(M / K) windows, the last a tail of M mod K
    microbatches when K does not divide M."""
    m = v.count(num_microbatches, "num_microbatches", minimum=1)
    k = v.count(accum_steps, "accum_steps", minimum=1)
    return tuple((start, min(k, m - start)) for start in range(0, m, k))


def _checked(counts: object) -> tuple[tuple[int, ...], ...]:
    grid = v.count_grid(counts)
    if len(grid[0]) > MAX_MICROBATCHES:
        raise v.InvalidInput(
            "counts", len(grid[0]), "in_range", f"1..{MAX_MICROBATCHES} microbatches a rank"
        )
    return grid


def epoch_updates(counts: object, accum_steps: int, loop: str) -> tuple[WindowUpdate, ...]:
    """Each window's update under `loop` (LOOPS), beside the single-process run.

    Args:
        counts: P x M valid labels n_rm, rank r's m-th microbatch of the epoch.
        accum_steps: K >= 1, microbatches a rank accumulates per update.
        loop: "global_tokens" (sum of terms / N_w), "window_count" (each microbatch's mean /
            k', the window's own count), or "accum_steps" (each microbatch's mean / K).
    Returns:
        One WindowUpdate per window, in order; weight_sum None where it is undefined.
    """
    grid = _checked(counts)
    loop = v.choice(loop, "loop", LOOPS)
    world_size = len(grid)
    found = []
    for index, (start, microsteps) in enumerate(epoch_windows(len(grid[0]), accum_steps)):
        cells = [row[start : start + microsteps] for row in grid]
        n = sum(map(sum, cells))
        window = Window(index, start, microsteps, n, microsteps < accum_steps)
        weight = _weight_sum(cells, n, world_size, microsteps, accum_steps, loop)
        correct = 1.0 if n else None
        ratio = None if weight is None or correct is None else weight / correct
        found.append(WindowUpdate(window, weight, correct, ratio))
    return tuple(found)


def _weight_sum(
    cells: list[tuple[int, ...]], n: int, p: int, microsteps: int, k: int, loop: str
) -> float | None:
    if loop == "global_tokens":
        return None if n == 0 else math.fsum(c / n for row in cells for c in row)
    if any(c == 0 for row in cells for c in row):
        return None  # a microbatch's mean over no terms: 0 / 0
    divisor = microsteps if loop == "window_count" else k
    return math.fsum(c / (p * divisor * c) for row in cells for c in row)
