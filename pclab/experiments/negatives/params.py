"""The negatives experiment's parameters: P ranks, the temperature and the two shared weights."""

from __future__ import annotations

from dataclasses import dataclass

from pclab.core import validation as v
from pclab.experiments.declare import Declared, param

LR = 0.1  # one plain SGD step
MIN_WORLD_SIZE, MAX_WORLD_SIZE = 2, 8


def _world_size(value: object, field: str) -> int:
    world_size = v.count(value, field, minimum=1)
    if not MIN_WORLD_SIZE <= world_size <= MAX_WORLD_SIZE:
        raise v.InvalidInput(field, world_size, "in_range", f"{MIN_WORLD_SIZE}..{MAX_WORLD_SIZE}")
    return world_size


@dataclass(frozen=True)
class Params(Declared):
    world_size: int = param(
        2,
        f"processes P, {MIN_WORLD_SIZE}..{MAX_WORLD_SIZE}",
        _world_size,
        parse=int,
        worker=False,
        metavar="P",
    )
    """How many ranks, each owning one (a_r, b_r) pair; torchrun's nproc on a rank."""
    tau: float = param(1.0, "temperature tau > 0", v.positive, parse=float, metavar="T")
    """Every similarity q_i d_j is divided by it: smaller sharpens the softmax."""
    wq: float = param(1.0, "the query encoder's shared weight", v.finite, parse=float)
    """q_r = wq a_r on every rank: the one scalar DDP averages for the queries."""
    wd: float = param(1.0, "the document encoder's shared weight", v.finite, parse=float)
    """d_r = wd b_r: the scalar whose gradient the gather sends back to each document's owner."""


def default_pairs(world_size: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The seed's a = [1, 2], b = [1, -1], extended deterministically for more ranks:

    a_r = r + 1,   b_r = (-1)^r / 2^floor(r/2)     (b = 1, -1, 0.5, -0.5, 0.25, ...)
    """
    world_size = v.count(world_size, "world_size", minimum=1)
    a = tuple(float(r + 1) for r in range(world_size))
    b = tuple((-1.0) ** r / 2.0 ** (r // 2) for r in range(world_size))
    return a, b
