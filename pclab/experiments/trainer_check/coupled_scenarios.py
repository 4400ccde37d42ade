"""The coupled mode's scenarios: n_rk items for rank r, microstep k (`make_microbatch(n, g)`).

A gather needs every rank to hold the same number of items at a microstep, so every default
scenario keeps a microstep's size equal across ranks and varies it between microsteps (so a
pool per microstep and the global pool weigh items differently):

    uneven_microsteps   microstep k holds SIZES[k] items on every rank (3, 2, 5, 4, ...)
    shifted_microsteps  SIZES[k + 1]: other sizes, other items

At least 2 items a microbatch (BatchNorm in training mode needs 2 values a channel).
`--counts "3,2;3,2"` replaces them with one scenario, "custom", which may make the ranks
unequal (then a trainer that gathers must pad: the ranks' collectives would not pair up).
With P x K = 1 nothing is split: every scheme is the same objective (no evidence).
"""

from __future__ import annotations

from collections.abc import Sequence

from pclab.core import validation as v
from pclab.experiments.trainer_check.coupled_contract import MAX_ITEMS
from pclab.experiments.trainer_check.scenarios import Grid

NAMES = ("uneven_microsteps", "shifted_microsteps")
SIZES = (3, 2, 5, 4, 2, 6, 3, 4, 5)  # items per microbatch, by microstep (K <= 8, shifted +1)


def scenario_sizes(world_size: int, accum_steps: int) -> dict[str, Grid]:
    """{name: P x K items grid} of the default coupled scenarios."""
    p = v.count(world_size, "world_size", minimum=1)
    k = v.count(accum_steps, "accum_steps", minimum=1)
    if k + 1 > len(SIZES):
        raise v.InvalidInput("accum_steps", k, "in_range", f"1..{len(SIZES) - 1}")
    return {
        name: tuple(tuple(SIZES[shift : shift + k]) for _ in range(p))
        for shift, name in enumerate(NAMES)
    }


def checked_counts(counts: Sequence[Sequence[int]]) -> Grid:
    """--counts for the coupled mode: every microbatch holds 1..MAX_ITEMS items (an empty
    one has no objective: a pool of nothing); ValueError naming the cell otherwise."""
    grid = v.count_grid([list(row) for row in counts])
    for r, row in enumerate(grid):
        for k, n in enumerate(row):
            if not 1 <= n <= MAX_ITEMS:
                raise v.InvalidInput("counts", n, "in_range", f"1..{MAX_ITEMS} items", cell=(r, k))
    return grid
