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
DEVICES = ("cpu", "cuda")  # cpu: Gloo (the default, even where CUDA exists); cuda: NCCL
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
    device: str = "cpu"

    @classmethod
    def checked(
        cls,
        trainer: str | tuple[str, ...] | list[str] = DEFAULT_TRAINER,
        world_size: int | None = None,
        accum: int | None = None,
        counts: str | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        device: str = "cpu",
    ) -> Params:
        """Validated parameters (ValueError / TypeError naming a bad value). P and K default
        to 2; with `counts` ("3,8;8,16") they are read from it, and a `world_size` or
        `accum` that contradicts it is an error."""
        names = [trainer] if isinstance(trainer, str | Path) else list(trainer)
        if not names:
            raise v.InvalidInput("trainer", trainer, "non_empty")
        paths = []
        for name in names:
            path = Path(name).expanduser().resolve()
            if not path.is_file():
                raise v.InvalidInput("trainer", str(name), "one_of", "an existing .py file")
            paths.append(path)
        grid = None
        if counts is not None:
            grid = parse_counts(counts)
            shape = {"world_size": (world_size, len(grid)), "accum": (accum, len(grid[0]))}
            for field, (given, read) in shape.items():
                if given is not None and given != read:
                    detail = f"{read}, as counts={counts!r} says"
                    raise v.InvalidInput(field, given, "same_shape", detail)
            world_size, accum = len(grid), len(grid[0])
        world_size = _in_range(2 if world_size is None else world_size, "world_size", MAX_RANKS)
        accum = _in_range(2 if accum is None else accum, "accum", MAX_ACCUM)
        tolerance = v.non_negative(tolerance, "tolerance")
        device = v.choice(device, "device", DEVICES)
        digests = tuple(hashlib.sha256(p.read_bytes()).hexdigest() for p in paths)
        return cls(tuple(map(str, paths)), world_size, accum, grid, tolerance, digests, device)

    def worker_args(self) -> list[str]:
        args = [f"--accum={self.accum_steps}", f"--tolerance={self.tolerance!r}"]
        if self.device != "cpu":
            args.append(f"--device={self.device}")
        if self.counts is not None:
            args.append("--counts=" + ";".join(",".join(map(str, row)) for row in self.counts))
        return [*args, *(f"--trainer={path}" for path in self.trainers)]


def _in_range(value: object, field: str, top: int) -> int:
    number = v.count(value, field, minimum=1)
    if number > top:
        raise v.InvalidInput(field, number, "in_range", f"1..{top}")
    return number
