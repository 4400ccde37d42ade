"""The coupled mode on a rank (mode_protocols.RankMode): a trainer whose loss of one item depends on
the others (in-batch negatives, BatchNorm statistics), a file with batch_loss (issue 28).

Its scenarios are item counts per microbatch (coupled_scenarios.py); its reference steps a
fresh model on the global-batch objective batch_loss(model, every microbatch of every rank,
rank-major), clipped once to MAX_GRAD_NORM; its solve names the objective behind the SGD
change (core.coupled_schemes.solve_schemes against every candidate's gradient at the initial
weights, the change over the reference's clip coefficient). The pipeline around them is the
token mode's (pipeline.py):

    pclab check examples/trainers/gradcache.py --json
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

import pclab.experiments.trainer_check.coupled_contract as coupled_contract
import pclab.experiments.trainer_check.microbatches as microbatches
from pclab.core import coupled_objectives as co
from pclab.core.coupled_schemes import solve_schemes
from pclab.experiments.trainer_check.coupled_scenarios import checked_counts, scenario_sizes
from pclab.experiments.trainer_check.diagnoses import Diagnosis, objective_invalid
from pclab.experiments.trainer_check.judging import SOLVE_RTOL
from pclab.experiments.trainer_check.mode_protocols import Batch, Grid, ReferenceLoss
from pclab.experiments.trainer_check.trainer import Trainer, on_device
from pclab.experiments.trainer_check.trainer_raised import TrainerRaised

SHAPE = "sizes"  # a scenario's grid: the items of each microbatch


def objectives(trainer: Trainer) -> dict[str, Any]:
    """The file's callables as core.coupled_objectives takes them, each through trainer.call
    (an exception names the user's line)."""

    def wrap(name: str) -> Callable[..., Any] | None:
        return (lambda *args: trainer.call(name, *args)) if trainer.has(name) else None

    return {n: wrap(n) for n in ("batch_loss", "embed", "embedding_loss")}


def global_loss(trainer: Trainer) -> co.BatchLoss:
    """batch_loss, or embedding_loss of the concatenated embeddings without one (SYMMETRIC:
    the mean of both directions)."""
    given = objectives(trainer)
    if given["batch_loss"] is not None:
        loss: co.BatchLoss = given["batch_loss"]
        return loss
    return co.embedding_batch_loss(
        given["embed"], given["embedding_loss"], coupled_contract.symmetric(trainer.module)
    )


def scenarios(
    trainer: Trainer, world: int, accum: int, counts: Grid | None, given: str
) -> tuple[dict[str, Grid], list[dict[str, str]]]:
    """The default item-count scenarios (coupled_scenarios.py), or --counts as "custom"."""
    grids = scenario_sizes(world, accum) if counts is None else {"custom": checked_counts(counts)}
    return dict(grids), []


def header(trainer: Trainer, counts: Grid | None, given: str) -> dict[str, Any]:
    return {}


def batches(
    trainer: Trainer, name: str, grid: Grid, counts: Grid | None, given: str
) -> list[list[Batch]]:
    return microbatches.scenario_batches(trainer, name, grid)


def reference_loss(trainer: Trainer, batches: Sequence[Sequence[Batch]]) -> ReferenceLoss:
    """The global-batch objective: batch_loss over every microbatch of every rank."""

    def global_batch(model: torch.nn.Module) -> torch.Tensor:
        grid = [[on_device(b, model) for b in row] for row in batches]
        return co.pool_objective("global_batch", global_loss(trainer), model, grid)

    return global_batch


def reorders(dtype: str) -> bool:
    """Below float64 only: a float64 floor is one unit in the last place (the coupled
    objectives are not a plain sum whose order could be reversed term by term)."""
    return dtype != "float64"


def preflight(trainer: Trainer, model: torch.nn.Module) -> list[Diagnosis]:
    """The objective a finite scalar on two microbatches of 2 items."""
    batches = microbatches.scenario_batches(trainer, "preflight", [[2], [2]])
    grid = [[on_device(b, model) for b in row] for row in batches]
    try:
        co.pool_objective("global_batch", global_loss(trainer), model, grid)
    except ValueError as exc:  # core's InvalidInput: not a scalar, not finite, bad rows
        return [objective_invalid(str(exc))]
    return []


def solve(
    trainer: Trainer, batches: list[list[Batch]], delta: torch.Tensor, model: torch.nn.Module
) -> dict[str, Any]:
    """The scheme behind `delta` (flat, named_parameters order): each candidate's gradient at
    the fresh `model`'s weights (a candidate whose callables raise is left out, with why),
    the change over the reference's clip coefficient, and core.coupled_schemes.solve_schemes."""
    grid = [[on_device(b, model) for b in row] for row in batches]
    given = objectives(trainer)
    flag = coupled_contract.symmetric(trainer.module)
    names = co.NAMED_SCHEMES if given["embed"] else co.POOL_SCHEMES
    grads: dict[str, co.Gradient] = {}
    left_out: dict[str, str] = {}
    for scheme in names:
        try:
            grads[scheme] = co.candidate_gradient(scheme, model, grid, **given, symmetric=flag)
        except (TrainerRaised, ValueError) as exc:  # a CLIP loss given more documents
            left_out[scheme] = str(exc)
    named = dict(model.named_parameters())
    parts = torch.split(delta.cpu(), [p.numel() for p in named.values()])
    change = {n: part.view(p.shape) for (n, p), part in zip(named.items(), parts)}
    clip = _clip_coefficient(trainer, grads["global_batch"])
    if clip is not None:
        change = {n: t / clip for n, t in change.items()}
    found: dict[str, Any] = {"candidates": list(grads), "left_out": left_out}
    try:
        solved = solve_schemes(change, grads, rtol=SOLVE_RTOL[trainer.dtype])
    except ValueError:  # a non-finite update
        return found | {"scheme": None, "not_finite": True, "clip_coefficient": clip}
    return found | {
        "scheme": solved.scheme,
        "matching_schemes": list(solved.matching_schemes),
        "coinciding": [list(g) for g in solved.coinciding],
        "untold": list(solved.untold),
        "scale": solved.scale,
        "scale_groups": [
            {"factor": g.factor, "parameters": list(g.parameters)} for g in solved.scale_groups
        ],
        "residual": solved.residual,
        "fits": {s: {"factor": f.factor, "residual": f.residual} for s, f in solved.fits.items()},
        "clip_coefficient": clip,
    }


def _clip_coefficient(trainer: Trainer, gradient: co.Gradient) -> float | None:
    """max / (|g| + 1e-6), at most 1, as clip_grad_norm_ computes it (None without one)."""
    if trainer.max_grad_norm is None:
        return None
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in gradient.values()))
    return min(1.0, trainer.max_grad_norm / (norm + 1e-6))
