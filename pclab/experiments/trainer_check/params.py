"""The trainer check's parameters: which trainer file(s), on how many ranks and microsteps, at
which tolerance, and optionally one label-count pattern instead of the standard scenarios."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TypeGuard

from pclab.core import validation as v
from pclab.experiments.declare import Declared, param
from pclab.experiments.trainer_check.scenarios import Grid, parse_counts
from pclab.paths import EXAMPLES_DIR

MAX_RANKS, MAX_ACCUM = 8, 8
DEFAULT_TOLERANCE = 1e-10
DEVICES = ("cpu", "cuda")  # cpu: Gloo (the default, even where CUDA exists); cuda: NCCL
# What a run with no trainer named checks (the benchmark's job): a bundled correct DDP trainer.
DEFAULT_TRAINER = str(EXAMPLES_DIR / "correct_ddp_no_sync.py")


def _items(value: object) -> list[object]:
    """list(value), or the TypeError list() raises for a value that is not iterable."""
    if not isinstance(value, Iterable):
        raise TypeError(f"{type(value).__name__!r} object is not iterable")
    return list(value)


def _trainers(value: object, field: str) -> tuple[str, ...]:
    """One trainer file or several, each an existing file, as absolute paths."""
    names = [value] if isinstance(value, str | Path) else _items(value)
    if not names:
        raise v.InvalidInput(field, value, "non_empty")
    paths = []
    for name in names:
        if not isinstance(name, str | PathLike):
            raise TypeError(f"{field}={name!r} is not a path")
        path = Path(name).expanduser().resolve()
        if not path.is_file():
            raise v.InvalidInput(field, str(name), "one_of", "an existing .py file")
        paths.append(str(path))
    return tuple(paths)


def _shape(top: int) -> Callable[[object, str], int | None]:
    """P or K: 1..top, or None for "2, unless --counts says" (`Params.relate` decides)."""

    def check(value: object, field: str) -> int | None:
        if value is None:
            return None
        number = v.count(value, field, minimum=1)
        if number > top:
            raise v.InvalidInput(field, number, "in_range", f"1..{top}")
        return number

    return check


def _counts(value: object, field: str) -> Grid | None:
    if value is None:
        return None
    return parse_counts(value if isinstance(value, str) else _counts_text(value))


def _counts_text(grid: object) -> str:
    return ";".join(",".join(map(str, _items(row))) for row in _items(grid))


def _is_grid(value: object) -> TypeGuard[Grid]:
    """A counts grid as `_counts` returns it (else None)."""
    return isinstance(value, tuple) and all(isinstance(row, tuple) for row in value)


@dataclass(frozen=True)
class Params(Declared):
    trainers: tuple[str, ...] = param(
        (DEFAULT_TRAINER,),
        "your trainer file(s)",
        _trainers,
        name="trainer",
        option=False,
        many=True,
    )
    """The files checked, each against the single-process reference (the command's positional)."""
    world_size: int = param(
        None,
        "ranks P, 1..8 (default 2, or what --counts says)",
        _shape(MAX_RANKS),
        parse=int,
        worker=False,
    )
    """How many ranks run the user's train_step; torchrun's nproc on a rank."""
    accum_steps: int = param(
        None,
        "microsteps K, 1..8 (default 2, or what --counts says)",
        _shape(MAX_ACCUM),
        name="accum",
        parse=int,
    )
    """Microbatches each rank accumulates before its one optimizer step."""
    counts: tuple[tuple[int, ...], ...] | None = param(
        None,
        'one pattern of terms instead of the five scenarios, e.g. "3,8;8,16": ranks split '
        "by ';', microsteps by ','; the labels are placed off a sequence's position 0 where "
        "they fit, so a causal LM's shift drops none; it sets P and K (a --world-size or "
        "--accum that contradicts it is an error)",
        _counts,
        text=_counts_text,
    )
    """Terms (counted labels after any causal shift) per rank and microstep."""
    counts_labels: tuple[tuple[int, ...], ...] | None = param(
        None,
        "--counts as labels placed, position 0 included (a causal LM's terms are then "
        "fewer by the labels at position 0; a microbatch left with none is said)",
        _counts,
        text=_counts_text,
    )
    """Labels placed per rank and microstep, position 0 included: what a user writes when
    the question is what the trainer counts before its shift (torchtune's form)."""
    tolerance: float = param(
        DEFAULT_TOLERANCE,
        "largest |user - reference| on any parameter or optimizer-state tensor (raised per "
        "scenario to 10x the reference's own floor in the file's DTYPE)",
        v.non_negative,
        parse=float,
    )
    """Past it a tensor differs: the report names the first one and the microstep."""
    device: str = param(
        "cpu",
        "where each rank runs: cpu (Gloo) or cuda (NCCL, each rank on its local GPU)",
        choices=DEVICES,
    )
    """The model and the microbatches move there too. The lab's own tests run cpu only."""
    trainer_sha256: tuple[str, ...] = ()  # the files' contents: a cached result follows edits

    @classmethod
    def checked(cls, trainer: object = (DEFAULT_TRAINER,), **raw: object) -> Params:
        """Validated parameters (ValueError / TypeError naming a bad value); the trainer
        file(s) may come first. P and K default to 2; with `counts` ("3,8;8,16") they are
        read from it, and a `world_size` or `accum` that contradicts it is an error."""
        return super().checked(trainer=trainer, **raw)

    @classmethod
    def relate(cls, values: dict[str, object]) -> dict[str, object]:
        if values["counts"] is not None and values["counts_labels"] is not None:
            raise v.InvalidInput(
                "counts_labels", _counts_text(values["counts_labels"]), "one_of", "not with counts"
            )
        grid = values["counts"] if values["counts"] is not None else values["counts_labels"]
        if _is_grid(grid):  # else None: no counts given
            read = {"world_size": len(grid), "accum_steps": len(grid[0])}
            for field, shown in (("world_size", "world_size"), ("accum_steps", "accum")):
                given = values[field]
                if given is not None and given != read[field]:
                    detail = f"{read[field]}, as counts={_counts_text(grid)!r} says"
                    raise v.InvalidInput(shown, given, "same_shape", detail)
            values |= read
        for field in ("world_size", "accum_steps"):
            values[field] = 2 if values[field] is None else values[field]
        values["trainer_sha256"] = tuple(
            hashlib.sha256(Path(str(f)).read_bytes()).hexdigest()
            for f in _items(values["trainers"])
        )
        return values
