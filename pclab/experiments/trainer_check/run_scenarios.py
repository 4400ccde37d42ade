"""The run mode's scenarios: n_rem valid labels for rank r, epoch e, microbatch m. Each
stands alone (its own fresh model and run); every epoch holds M = 2K + 1 microbatches a rank
(5 at K = 2), so it has windows of K and a tail of 1, the same on every rank:

    uneven        unequal counts in every window, none empty: evidence for the normalisation
                  (where a wrong scheme can tell), the tail and the schedule
    empty_window  uneven, with every rank's second window of the first epoch empty (N = 0):
                  everyone skips it (no step, no scheduler step, no state change)
    equal_counts  every microbatch half full: no evidence for the normalisation (wrong
                  schemes give the same weights), still evidence for the tail and the schedule

With P x K = 1 there is no window to split and no tail: no scenario is evidence.
"""

from __future__ import annotations

NAMES = ("uneven", "empty_window", "equal_counts")
EPOCHS = 2
RunGrid = tuple[tuple[tuple[int, ...], ...], ...]  # [rank][epoch][microbatch]


def microbatches_per_epoch(accum_steps: int) -> int:
    """M = 2K + 1: two full windows and a tail of one (at K = 1: three windows, no tail)."""
    return 2 * accum_steps + 1


def scenario_counts(world_size: int, accum_steps: int, capacity: int) -> dict[str, RunGrid]:
    """{name: [rank][epoch][microbatch] counts} of the default run scenarios."""
    m = microbatches_per_epoch(accum_steps)

    def uneven(r: int, e: int, j: int) -> int:
        return 1 + (3 + 5 * r + 7 * e + 11 * j + 2 * r * j) % capacity

    base = tuple(
        tuple(tuple(uneven(r, e, j) for j in range(m)) for e in range(EPOCHS))
        for r in range(world_size)
    )
    second = range(accum_steps, min(2 * accum_steps, m))
    empty = tuple(
        tuple(
            tuple(0 if e == 0 and j in second else n for j, n in enumerate(epoch))
            for e, epoch in enumerate(rank)
        )
        for rank in base
    )
    half = max(1, capacity // 2)
    equal = tuple(tuple((half,) * m for _ in range(EPOCHS)) for _ in range(world_size))
    return {"uneven": base, "empty_window": empty, "equal_counts": equal}
