"""The clipping experiment's parameters: which rank (if any) overflows, and with what."""

from __future__ import annotations

from dataclasses import dataclass

from pclab.core import clipping
from pclab.core import validation as v
from pclab.experiments.declare import Declared, param

WORLD_SIZE = 2
LAYOUT, SCALE, MAX_NORM, LR, MOMENTUM = "seed_replicated", 8.0, 1.0, 0.1, 0.9


def _overflow_rank(value: object, field: str) -> int | None:
    if value is None:
        return None
    rank = v.count(value, field)
    if rank >= WORLD_SIZE:
        raise v.InvalidInput(field, rank, "in_range", f"0..{WORLD_SIZE - 1}")
    return rank


def _world_size(value: object, field: str) -> int:
    if value != WORLD_SIZE:  # the seed's layout has two ranks
        raise v.InvalidInput(field, value, "one_of", str(WORLD_SIZE))
    return WORLD_SIZE


@dataclass(frozen=True)
class Params(Declared):
    inject_overflow: int | None = param(
        None, "the rank whose gradient overflows, 0 or 1", _overflow_rank, parse=int, metavar="RANK"
    )
    """Adds a second scenario in which this rank's shard is non-finite: every rank must skip."""
    nonfinite: str = param("inf", "what overflows", choices=tuple(clipping.INJECTIONS))
    """The value written into the overflowing shard (with --inject-overflow only)."""
    world_size: int = param(
        WORLD_SIZE, "processes (the seed's two)", _world_size, option=False, worker=False
    )
    """Fixed at two: the seed's layout has one shard per rank and a replicated one."""


def scenario_grads(inject_rank: int | None, nonfinite: str = "inf") -> tuple[dict[str, float], ...]:
    """The scaled per-rank gradients of one scenario (inject_rank None: all finite)."""
    inject = None if inject_rank is None else (inject_rank, f"w{inject_rank}", nonfinite)
    return clipping.scenario_grads(LAYOUT, SCALE, inject=inject)
