"""The token mode on a rank (mode_protocols.RankMode): a trainer whose objective is the global token
mean, the sum of every microbatch's per-label losses over N, the global count of terms.

Its scenarios are label-count patterns (scenarios.py); its reference sums every cell's terms
and divides by N once, clipped once to MAX_GRAD_NORM, with no step at N = 0; its solve reads
the SGD change as one weight per microbatch (core.update_weights), which report-side
token_report.py names as a scheme.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import pclab.experiments.trainer_check.diagnoses as diagnoses
import pclab.experiments.trainer_check.microbatches as microbatches
from pclab.core import update_weights
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.mode_protocols import Batch, Grid, ReferenceLoss
from pclab.experiments.trainer_check.scenarios import scenario_counts
from pclab.experiments.trainer_check.trainer import Trainer, on_device

SHAPE = "label_positions"  # a scenario's grid: the counted labels the check put in each cell


def scenarios(
    trainer: Trainer, world: int, accum: int, counts: Grid | None, given: str
) -> tuple[dict[str, Grid], list[dict[str, str]]]:
    """The five label-count scenarios (scenarios.py), or --counts as one, "custom"; a count
    more than a microbatch holds is a ValueError naming the limit."""
    grids: dict[str, Grid]
    if counts is None:
        standard, skipped = scenario_counts(world, accum, trainer.capacity)
        grids = dict(standard)
    else:
        grids, skipped = {"custom": counts}, []
    too_many = [n for grid in grids.values() for row in grid for n in row if n > trainer.capacity]
    if too_many:
        limit = f"{trainer.capacity} = BATCH_SIZE x {trainer.labelled_columns} labelled positions"
        raise ValueError(f"counts={max(too_many)} is more than a microbatch holds ({limit})")
    return grids, skipped


def header(trainer: Trainer, counts: Grid | None, given: str) -> dict[str, Any]:
    return {
        "first_position_labelled": trainer.first_position_labelled,
        "counts_given": None if counts is None else given,
    }


def batches(
    trainer: Trainer, name: str, grid: Grid, counts: Grid | None, given: str
) -> list[list[Batch]]:
    """--counts in terms places its labels off a sequence's position 0 where they fit."""
    off_first = counts is not None and given == "terms"
    return microbatches.scenario_batches(trainer, name, grid, off_first)


def terms(trainer: Trainer, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """The objective's terms for one microbatch, checked to be a 1-D tensor."""
    losses = trainer.call("token_losses", model, on_device(batch, model))
    if not isinstance(losses, torch.Tensor) or losses.dim() != 1:
        kind = getattr(losses, "shape", type(losses).__name__)
        raise ValueError(f"token_losses returned {kind}: it must be a 1-D tensor of losses")
    return losses


def preflight(trainer: Trainer, model: torch.nn.Module) -> list[Diagnosis]:
    """token_losses against the counted labels of a few microbatches (0, a few, full). The
    default microbatch may lose exactly its position-0 labels (a causal LM's shift)."""
    own = trainer.has("make_microbatch")
    sizes = sorted({0, 1, max(1, trainer.capacity // 3), trainer.capacity}, reverse=True)
    for step, valid in enumerate(sizes):
        batch = microbatches.microbatch(trainer, "preflight", 0, step, valid)
        got = len(terms(trainer, model, batch))
        shifted = not own and got == valid - microbatches.labels_at_first_position(batch)
        if got != valid and not shifted:
            return [diagnoses.terms_mismatch(got, valid, own)]
    return []


def reference_loss(trainer: Trainer, batches: Sequence[Sequence[Batch]]) -> ReferenceLoss:
    """The global token mean over the grid: the sum of every microbatch's terms over N, the
    global count of terms; None at N = 0 (nothing to average: no step)."""

    def global_token_mean(model: torch.nn.Module) -> torch.Tensor | None:
        losses = [terms(trainer, model, b) for row in batches for b in row]
        n = sum(len(x) for x in losses)
        return sum(x.sum() for x in losses) / n if n else None

    return global_token_mean


def reorders(dtype: str) -> bool:
    """Always: the floor is the reversed sum's gap, in float64 too."""
    return True


def flat_gradient(trainer: Trainer, model: torch.nn.Module, batch: Batch) -> list[float]:
    """d(sum of this microbatch's terms)/d(parameters) at the model's weights, flattened
    (zeros for a microbatch without terms)."""
    model.zero_grad(set_to_none=True)
    losses = terms(trainer, model, batch)
    if len(losses):
        losses.sum().backward()
    parts = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten()
        for p in model.parameters()
    ]
    flat: list[float] = torch.cat(parts).double().cpu().tolist()
    return flat


def solve(
    trainer: Trainer, batches: list[list[Batch]], delta: torch.Tensor, model: torch.nn.Module
) -> dict[str, Any]:
    """The term counts and, solved from `delta` against each microbatch's gradient at the
    fresh `model`'s weights, each microbatch's weight x N (over the reference's clip
    coefficient when the file sets MAX_GRAD_NORM)."""
    at_start = model
    grads: list[list[list[float]]] = []
    term_counts: list[list[int]] = []
    for row in batches:
        grads.append([flat_gradient(trainer, at_start, b) for b in row])
        term_counts.append([len(terms(trainer, at_start, b)) for b in row])
    clip = _clip_coefficient(trainer, grads, term_counts)
    try:
        solved = update_weights.solve_weights(grads, delta.cpu().tolist(), term_counts)
    except ValueError:  # a non-finite update (a NaN from a mean over nothing, say)
        return {"counts": term_counts, "weights": None, "residual": None, "identifiable": None}
    weights = [
        [None if w is None else w / (clip or 1.0) for w in row] for row in solved.weights_times_n
    ]
    return {
        "counts": term_counts,
        "weights": weights,
        "residual": solved.residual,
        "identifiable": solved.identifiable,
        "clip_coefficient": clip,
    }


def _clip_coefficient(
    trainer: Trainer, grads: list[list[list[float]]], term_counts: list[list[int]]
) -> float | None:
    """The reference's clip coefficient, max / (|sum g / N| + 1e-6) at most 1, as
    torch.nn.utils.clip_grad_norm_ computes it; None without MAX_GRAD_NORM or at N = 0."""
    import numpy as np

    n = sum(map(sum, term_counts))
    if trainer.max_grad_norm is None or n == 0:
        return None
    total = np.sum([np.asarray(g) for row in grads for g in row], axis=0) / n
    coefficient: float = min(1.0, trainer.max_grad_norm / (float(np.linalg.norm(total)) + 1e-6))
    return coefficient
