"""The negatives experiment's parameters: P ranks, the temperature and the two shared weights."""

from __future__ import annotations

from dataclasses import dataclass

from pclab.core import validation as v

LR = 0.1  # one plain SGD step
MIN_WORLD_SIZE, MAX_WORLD_SIZE = 2, 8
DEFAULTS = {"tau": 1.0, "wq": 1.0, "wd": 1.0}


@dataclass(frozen=True)
class Params:
    world_size: int = 2
    tau: float = 1.0
    wq: float = 1.0
    wd: float = 1.0

    @classmethod
    def checked(
        cls, world_size: int = 2, tau: float = 1.0, wq: float = 1.0, wd: float = 1.0
    ) -> Params:
        """Validated parameters of one launch (ValueError / TypeError naming a bad value)."""
        world_size = v.count(world_size, "world_size", minimum=1)
        if not MIN_WORLD_SIZE <= world_size <= MAX_WORLD_SIZE:
            allowed = f"{MIN_WORLD_SIZE}..{MAX_WORLD_SIZE}"
            raise v.InvalidInput("world_size", world_size, "in_range", allowed)
        return cls(
            world_size=world_size,
            tau=v.positive(tau, "tau"),
            wq=v.finite(wq, "wq"),
            wd=v.finite(wd, "wd"),
        )

    def worker_args(self) -> list[str]:
        return [f"--tau={self.tau!r}", f"--wq={self.wq!r}", f"--wd={self.wd!r}", f"--lr={LR!r}"]


def default_pairs(world_size: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The seed's a = [1, 2], b = [1, -1], extended deterministically for more ranks:

    a_r = r + 1,   b_r = (-1)^r / 2^floor(r/2)     (b = 1, -1, 0.5, -0.5, 0.25, ...)
    """
    world_size = v.count(world_size, "world_size", minimum=1)
    a = tuple(float(r + 1) for r in range(world_size))
    b = tuple((-1.0) ** r / 2.0 ** (r // 2) for r in range(world_size))
    return a, b
