"""The trainer check's parameters: which trainer file(s), on how many ranks and microsteps, at
which tolerance, and optionally one label-count pattern instead of the standard scenarios."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pclab.core import validation as v
from pclab.experiments.trainer_check.scenarios import parse_counts
from pclab.paths import EXAMPLES_DIR

MAX_RANKS, MAX_ACCUM = 8, 8
DEFAULT_TOLERANCE = 1e-10
# What a run with no trainer named checks (the benchmark's job): a bundled correct DDP trainer.
DEFAULT_TRAINER = str(EXAMPLES_DIR / "correct_ddp_no_sync.py")


@dataclass(frozen=True)
class Params:
    trainers: tuple[str, ...]  # absolute paths
    world_size: int = 2
    accum_steps: int = 2
    counts: tuple[tuple[int, ...], ...] | None = None
    tolerance: float = DEFAULT_TOLERANCE
    trainer_sha256: tuple[str, ...] = ()  # the files' contents: a cached result follows edits

    @classmethod
    def checked(
        cls,
        trainer: str | tuple[str, ...] | list[str] = DEFAULT_TRAINER,
        world_size: int = 2,
        accum: int = 2,
        counts: str | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
    ) -> Params:
        """Validated parameters (ValueError / TypeError naming a bad value). With `counts`
        ("3,8;8,16"), P and K are read from it and `world_size` / `accum` are ignored."""
        names = [trainer] if isinstance(trainer, str | Path) else list(trainer)
        if not names:
            raise v.InvalidInput("trainer", trainer, "non_empty")
        paths = []
        for name in names:
            path = Path(name).expanduser().resolve()
            if not path.is_file():
                raise v.InvalidInput("trainer", str(name), "one_of", "an existing .py file")
            paths.append(path)
        if counts is not None:
            grid = parse_counts(counts)
            world_size, accum = len(grid), len(grid[0])
        else:
            grid = None
        world_size = _in_range(world_size, "world_size", MAX_RANKS)
        accum = _in_range(accum, "accum", MAX_ACCUM)
        tolerance = v.non_negative(tolerance, "tolerance")
        digests = tuple(hashlib.sha256(p.read_bytes()).hexdigest() for p in paths)
        return cls(tuple(map(str, paths)), world_size, accum, grid, tolerance, digests)

    def worker_args(self) -> list[str]:
        args = [f"--accum={self.accum_steps}", f"--tolerance={self.tolerance!r}"]
        if self.counts is not None:
            args.append("--counts=" + ";".join(",".join(map(str, row)) for row in self.counts))
        return [*args, *(f"--trainer={path}" for path in self.trainers)]


def _in_range(value: object, field: str, top: int) -> int:
    number = v.count(value, field, minimum=1)
    if number > top:
        raise v.InvalidInput(field, number, "in_range", f"1..{top}")
    return number
