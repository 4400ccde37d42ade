"""The Transformer experiment's parameters and its plan: which windows each rank holds, the
counts each rule divides by, and what the theory (core.ledger) predicts for every branch."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pclab.core import ledger
from pclab.core import validation as v
from pclab.experiments.declare import Declared, joined, param
from pclab.experiments.transformer.lm import data

TOLERANCE, BRANCHES, MICROBATCHES = data.TOLERANCE, data.BRANCHES, data.MICROBATCHES
OPTIMIZER_CHOICES = {"sgd": ("sgd",), "adamw": ("adamw",), "both": ("sgd", "adamw")}
WORLD_SIZES = (1, 2, 4)  # each rank holds 4 / P whole windows
ZERO_LABELS = (0, 0, 0, 0)


def _labels(value: object, field: str) -> tuple[int, ...]:
    """Per-window label counts, checked against each window's capacity ("40,7,0,23" too)."""
    capacity = data.capacities(data.experiment_windows())
    if isinstance(value, str):
        return tuple(data.parse_labels(value, capacity))
    return tuple(data.validate_labels(value, capacity))


def _world_size(value: object, field: str) -> int:
    world_size = v.count(value, field, minimum=1)
    if world_size not in WORLD_SIZES:
        raise v.InvalidInput(field, world_size, "one_of", ", ".join(map(str, WORLD_SIZES)))
    return world_size


@dataclass(frozen=True)
class Params(Declared):
    labels: tuple[int, ...] = param(
        data.DEFAULT_LABELS,
        "labelled tokens per window",
        _labels,
        text=joined(","),
        metavar="N0,N1,N2,N3",
    )
    """The final n_w positions of each of the four windows carry a label ("40,7,0,23"); their
    sum is N, the global count every correct rule divides by."""
    world_size: int = param(
        2, f"processes P, one of {WORLD_SIZES}", _world_size, parse=int, worker=False, metavar="P"
    )
    """Each rank holds 4 / P whole windows; torchrun's nproc on a rank."""
    optimizer: str = param("both", "the optimizer(s) stepped", choices=tuple(OPTIMIZER_CHOICES))
    """SGD from fresh state, AdamW from the restored step-800 state, or each branch with both."""


def control_labels(world_size: int) -> tuple[int, ...]:
    """Equal counts per microbatch (40 and 40) AND per rank, though the windows differ."""
    return (24, 24, 24, 24) if world_size == 4 else (30, 10, 25, 15)


def rank_windows(world_size: int) -> list[list[int]]:
    per_rank = 4 // world_size
    return [list(range(r * per_rank, (r + 1) * per_rank)) for r in range(world_size)]


def label_counts(labels, world_size: int = 2) -> dict:
    """N, the two microbatches' counts and each rank's count for per-window `labels`."""
    return {
        "num_valid_labels": sum(labels),
        "microbatches": [sum(labels[w] for w in group) for group in MICROBATCHES],
        "ranks": [sum(labels[w] for w in rows) for rows in rank_windows(world_size)],
    }


def expected_correct(branch: str, labels, world_size: int) -> bool | None:
    """What the theory (core.ledger) predicts: True when the branch's weight per label
    equals 1 / N for every label, False when it differs, None when its mean is undefined."""
    if branch in ("full_batch", "accum_global_n", "ddp_pn_scale"):
        return True  # global-N rules: the same objective (and the same skip when N = 0)
    if branch == "accum_microbatch_mean":
        grid = [[sum(labels[w] for w in mb) for mb in MICROBATCHES]]
        scheme = "microbatch_mean"
    else:
        grid = [[sum(labels[w] for w in rows)] for rows in rank_windows(world_size)]
        scheme = "replica_mean"
    shares = ledger.update_shares(grid, scheme)
    correct = ledger.update_shares(grid, ledger.CORRECT_SCHEME)
    cells = [
        (s, c)
        for s_row, c_row in zip(shares, correct, strict=True)
        for s, c in zip(s_row, c_row, strict=True)
    ]
    if any(s is None for s, _ in cells):
        return None  # else N > 0, where every correct share is defined too
    return all(
        s is not None and c is not None and math.isclose(s, c, rel_tol=1e-12) for s, c in cells
    )


def predictions(labels, world_size: int = 2, optimizer: str = "both") -> list[dict]:
    """Every branch's `expected_correct` for these labels, before anything runs."""
    return [
        {"name": b, "optimizer": o, "expected_correct": expected_correct(b, labels, world_size)}
        for o in OPTIMIZER_CHOICES[optimizer]
        for b in BRANCHES
    ]
