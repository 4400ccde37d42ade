"""Rank 0 of the run mode: which weight each microbatch really got in each of the loop's
steps, from the loop run again with SGD at learning rate 1.

A step j of that run moves the parameters by delta_j = - lr_j sum_c w_c g_c, where lr_j is the
rate it stepped with (the loop's own scheduler may change it: observed, then divided out) and
g_c the gradient of candidate microbatch c's summed terms at the parameters the loop held when
it ran that microbatch (the parameters before the first step after it). The candidates are
every rank's microbatches consumed in the step's epoch up to the step, and the previous
epoch's last window: a correct loop gives its own window weight x N = 1 and every earlier
microbatch 0; an earlier one with weight is a gradient the loop did not clear (a missing
zero_grad, a tail that never stepped). Least squares: core.update_weights.solve_weights.

A model with fewer parameters than a step's candidates (a linear regression) cannot tell
them apart from one replay. The weights do not depend on where the loop starts, the
gradients do: replays from other starting points (run_loop.moved) add equations for the same
unknowns, solved together; a fit that leaves a residual means weights that move with the
starting point, and such a step stays not identifiable.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from pclab.core import update_weights
from pclab.experiments.trainer_check.run_observe import Step
from pclab.experiments.trainer_check.run_reference import Epochs, Window
from pclab.experiments.trainer_check.token_rank import flat_gradient
from pclab.experiments.trainer_check.trainer import Trainer


def held_at(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """`model` with its parameters set to a snapshot's ("parameter <name>")."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(state[f"parameter {name}"].to(p.dtype))
    return model


def _window_of(run_windows: list[Window], forwards: int) -> int | None:
    return next(
        (
            i
            for i, w in enumerate(run_windows)
            if w.first_forward < forwards <= w.first_forward + w.microsteps
        ),
        None,
    )


def _held(steps: list[Step], forwards: int) -> dict[str, torch.Tensor]:
    """The parameters the loop held when it ran its `forwards`-th microbatch: those before the
    first step taken after it."""
    return next(s for s in steps if s.forwards >= forwards).before


def _candidates(run_windows: list[Window], w: Window) -> list[int]:
    """The run's forward indices (1-based) a step closing window `w` may carry: its epoch's
    microbatches up to the window's end, and the previous epoch's last window."""
    epoch_start = w.first_forward - w.start
    first = epoch_start
    before = [x for x in run_windows if x.epoch == w.epoch - 1]
    if before:
        first = before[-1].first_forward
    return list(range(first + 1, w.first_forward + w.microsteps + 1))


def _clip_coefficient(
    trainer: Trainer, window_grads: list[list[list[float]]], w: Window
) -> float | None:
    """The reference's clip coefficient for this window at the step's parameters,
    max / (|sum g / N| + 1e-6) at most 1; None without MAX_GRAD_NORM."""
    if trainer.max_grad_norm is None or not w.num_valid_labels:
        return None
    total = torch.tensor([g for row in window_grads for g in row], dtype=torch.float64).sum(0)
    norm = float(total.norm()) / w.num_valid_labels
    return min(1.0, trainer.max_grad_norm / (norm + 1e-6))


STARTS = 4  # starting points a too-small model's loop is replayed from (the first: its own)


def _system(
    trainer: Trainer,
    model: torch.nn.Module,
    epochs: Epochs,
    terms: list[list[list[int]]],
    run_windows: list[Window],
    steps: list[Step],
    j: int,
) -> tuple[list[list[list[float]]], torch.Tensor, list[list[int]], float | None]:
    """Step j of one SGD replay as least squares: the candidates' gradients at the parameters
    the loop held (P x columns), its parameter change over lr x clip, the candidates' counts,
    the clip coefficient."""
    m = len(epochs[0][0])
    step = steps[j]
    w = run_windows[cast(int, _window_of(run_windows, step.forwards))]
    columns = _candidates(run_windows, w)
    grads = [
        [
            flat_gradient(
                trainer, held_at(model, _held(steps, f)), epochs[(f - 1) // m][r][(f - 1) % m]
            )
            for f in columns
        ]
        for r in range(len(epochs[0]))
    ]
    counts = [[terms[r][(f - 1) // m][(f - 1) % m] for f in columns] for r in range(len(epochs[0]))]
    clip = _clip_coefficient(trainer, [row[-w.microsteps :] for row in grads], w)
    names = [n for n, _ in model.named_parameters()]
    return grads, step.change(names) / (step.lrs[0] * (clip or 1.0)), counts, clip


def _stacked(systems: list[tuple[Any, torch.Tensor, Any, Any]]) -> tuple[Any, list[float]]:
    """One least-squares system from several replays of the same step: the same unknown
    weights, each replay's equations below the last (gradient vectors and changes joined)."""
    grads = [
        [[x for g in systems for x in g[0][r][c]] for c in range(len(systems[0][0][r]))]
        for r in range(len(systems[0][0]))
    ]
    return grads, torch.cat([change for _, change, _, _ in systems]).tolist()


def same_placement(runs: list[list[Step]], run_windows: list[Window]) -> bool:
    """Every replay took its steps in the same windows, each at the same forward: their
    steps can share one set of weights."""
    placed = [[(s.forwards, _window_of(run_windows, s.forwards)) for s in r] for r in runs]
    return all(p == placed[0] for p in placed)


def underdetermined(found: list[dict[str, Any]] | None) -> bool:
    """A step whose weights one replay could not tell apart (rank 0's solve; None elsewhere)."""
    return any(e.get("identifiable") is False for e in found or ())


def solve(
    trainer: Trainer,
    epochs: Epochs,
    terms: list[list[list[int]]],
    run_windows: list[Window],
    runs: list[list[Step]],
    device: str,
    rtol: float = 0.0,
) -> list[dict[str, Any]]:
    """One entry per SGD step: its window, the weights x N of that window's microbatches
    (P x k'), the largest |weight x N| on an earlier microbatch (and where), the residual.

    `runs`: the loop's SGD replays, the first from the file's own model. Several (the same
    step in each, from other starting points: STARTS) stack one system per step, which a
    model with fewer parameters than a step's candidates needs; a stacked solve that does not
    fit them within `rtol` (weights that change with the starting point) is not used: that
    step stays not identifiable."""
    model = trainer.build(device)
    steps = runs[0]
    found: list[dict[str, Any]] = []
    for j, step in enumerate(steps):
        at = _window_of(run_windows, step.forwards)
        lr = step.lrs[0] if step.lrs else 0.0
        if at is None or not lr or any(not r[j].lrs or not r[j].lrs[0] for r in runs):
            found.append({"step": j, "window": at, "weights": None, "leak": None})
            continue
        w = run_windows[at]
        systems = [_system(trainer, model, epochs, terms, run_windows, r, j) for r in runs]
        grads, delta = _stacked(systems)
        counts, clip = systems[0][2], systems[0][3]
        try:
            solved = update_weights.solve_weights(grads, delta, counts)
        except ValueError:  # a non-finite step
            found.append({"step": j, "window": at, "weights": None, "leak": None})
            continue
        if len(runs) > 1 and not (solved.residual is not None and solved.residual <= rtol):
            solved = update_weights.WeightSolve(solved.weights_times_n, solved.residual, False)
        total = sum(map(sum, counts))
        scale = w.num_valid_labels / total if total else 1.0
        grid = [[None if x is None else x * scale for x in row] for row in solved.weights_times_n]
        own = len(grid[0]) - w.microsteps  # the window's columns come last
        earlier = [abs(x) for row in grid for x in row[:own] if x is not None]
        # not identifiable: no weight is known, so no leak is either (None, never 0)
        leak = max(earlier, default=0.0) if solved.identifiable else None
        found.append(
            {
                "step": j,
                "window": at,
                "weights": [row[own:] for row in grid],
                "counts": [row[own:] for row in counts],
                "leak": leak,
                "residual": solved.residual,
                "identifiable": solved.identifiable,
                "lr": lr,
                "clip_coefficient": clip,
            }
        )
    return found
