"""The label-count patterns one check runs: n_rk valid labels for rank r, microstep k.

    uneven            every cell its own count, one microbatch full, the ranks' totals apart
                      by at least 1.5x (so DDP's mean of local means shows)
    empty_microbatch  uneven, with rank 0's last microbatch empty        (needs K >= 2)
    empty_rank        uneven, with the last rank holding no label at all (needs P >= 2)
    equal_counts      every microbatch half full, never at a sequence's position 0 (so a
                      causal LM's terms are equal too): the control, which wrong schemes
                      pass too, so it is never evidence
    no_labels         N = 0: the correct step changes nothing, on every rank

`--counts "3,8;8,16"` replaces them with one pattern named "custom" (ranks split by ";",
microsteps by ",").
"""

from __future__ import annotations

from pclab.core import validation as v

NAMES = ("uneven", "empty_microbatch", "empty_rank", "equal_counts", "no_labels")
OFF_FIRST_POSITION = ("equal_counts",)  # its labels avoid position 0: labels = terms, shifted
RANK_RATIO = 1.5  # uneven: the largest rank total over the smallest, at least (when it can)
Grid = tuple[tuple[int, ...], ...]


def uneven(world_size: int, accum_steps: int, capacity: int) -> Grid:
    """1 + 7 i mod capacity along the cells (rank-major), the first cell full; the last
    rank's cells halved (never below 1) until the rank totals are RANK_RATIO apart."""
    cells = [1 + (7 * i) % capacity for i in range(world_size * accum_steps)]
    cells[0] = capacity
    rows = [cells[r * accum_steps : (r + 1) * accum_steps] for r in range(world_size)]
    while world_size > 1 and max(rows[-1]) > 1:
        totals = [sum(row) for row in rows]
        if max(totals) >= RANK_RATIO * min(totals):
            break
        rows[-1] = [max(1, n // 2) for n in rows[-1]]
    return tuple(tuple(row) for row in rows)


def scenario_counts(
    world_size: int, accum_steps: int, capacity: int
) -> tuple[dict[str, Grid], list[dict[str, str]]]:
    """({name: counts grid}, [{"name", "reason"} for the scenarios this shape cannot hold])."""
    base = uneven(world_size, accum_steps, capacity)
    grids = {"uneven": base}
    skipped: list[dict[str, str]] = []
    if accum_steps >= 2:
        grids["empty_microbatch"] = ((*base[0][:-1], 0), *base[1:])
    else:
        skipped.append({"name": "empty_microbatch", "reason": "needs at least 2 microsteps"})
    if world_size >= 2:
        grids["empty_rank"] = (*base[:-1], (0,) * accum_steps)
    else:
        skipped.append({"name": "empty_rank", "reason": "needs at least 2 ranks"})
    half = max(1, capacity // 2)
    grids["equal_counts"] = tuple((half,) * accum_steps for _ in range(world_size))
    grids["no_labels"] = tuple((0,) * accum_steps for _ in range(world_size))
    return grids, skipped


def parse_counts(text: str) -> Grid:
    """'3,8;8,16' -> ((3, 8), (8, 16)): ranks split by ';', microsteps by ','."""
    if not isinstance(text, str) or not text.strip():
        raise v.InvalidInput("counts", text, "non_empty")
    rows = []
    for part in text.split(";"):
        try:
            rows.append([int(x) for x in part.split(",")])
        except ValueError:
            raise v.InvalidInput(
                "counts", text, "same_shape", "whole numbers like 3,8;8,16"
            ) from None
    return v.count_grid(rows)
