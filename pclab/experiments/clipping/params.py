"""The clipping experiment's parameters: which rank (if any) overflows, and with what."""

from __future__ import annotations

from dataclasses import dataclass

from pclab.core import clipping
from pclab.core import validation as v

WORLD_SIZE = 2
LAYOUT, SCALE, MAX_NORM, LR, MOMENTUM = "seed_replicated", 8.0, 1.0, 0.1, 0.9


@dataclass(frozen=True)
class Params:
    inject_overflow: int | None = None
    nonfinite: str = "inf"
    world_size: int = WORLD_SIZE

    @classmethod
    def checked(cls, inject_overflow: int | None = None, nonfinite: str = "inf") -> Params:
        """Validated parameters of one launch (ValueError / TypeError naming a bad value)."""
        if inject_overflow is not None:
            inject_overflow = v.count(inject_overflow, "inject_overflow")
            if inject_overflow >= WORLD_SIZE:
                allowed = f"0..{WORLD_SIZE - 1}"
                raise v.InvalidInput("inject_overflow", inject_overflow, "in_range", allowed)
        nonfinite = v.choice(nonfinite, "nonfinite", tuple(clipping.INJECTIONS))
        return cls(inject_overflow=inject_overflow, nonfinite=nonfinite)

    def worker_args(self) -> list[str]:
        args = [f"--nonfinite={self.nonfinite}"]
        if self.inject_overflow is not None:
            args.append(f"--inject-overflow={self.inject_overflow}")
        return args


def scenario_grads(inject_rank: int | None, nonfinite: str = "inf") -> tuple[dict[str, float], ...]:
    """The scaled per-rank gradients of one scenario (inject_rank None: all finite)."""
    inject = None if inject_rank is None else (inject_rank, f"w{inject_rank}", nonfinite)
    return clipping.scenario_grads(LAYOUT, SCALE, inject=inject)
