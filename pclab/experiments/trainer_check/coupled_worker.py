"""One rank of the trainer check in the coupled mode (a file with batch_loss: issue 28).

Per scenario (check_scenario), every rank
    1. builds every rank's microbatches with make_microbatch(n, generator) and steps a fresh
       model on the global-batch objective batch_loss(model, every microbatch of every rank,
       rank-major) with the file's optimizer, in this process alone (reference_update);
    2. steps another fresh model with the user's train_step on its own K microbatches and
       compares every parameter and optimizer-state tensor (the token mode's user_update and
       compare_updates, in its order: probe.judge_scenario with worker.STEPS);
    3. runs train_step again with SGD at learning rate 1 (sgd_delta); rank 0 then names the
       objective behind that change (core.coupled_schemes.solve_schemes against every
       candidate's gradient at the initial weights, the change over the reference's clip
       coefficient when the file sets MAX_GRAD_NORM).
Each scenario runs alone and writes progress lines as the token mode's do (guard.run_units):
a trainer that raises, hangs or mismatches its collectives (a gather of unequal sizes aborts
a rank) costs that scenario only. Same launcher, report, CLI and exit codes as the token mode:

    pclab check examples/trainers/gradcache.py --json
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from pclab.core import coupled_objectives as co
from pclab.core.coupled_schemes import solve_schemes
from pclab.experiments.trainer_check import diagnoses, guard, probe
from pclab.experiments.trainer_check.coupled_report import objective_invalid
from pclab.experiments.trainer_check.coupled_scenarios import checked_counts, scenario_sizes
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.probe import Batch, RankSteps
from pclab.experiments.trainer_check.report import SOLVE_RTOL, RankScenario
from pclab.experiments.trainer_check.scenarios import Grid
from pclab.experiments.trainer_check.trainer_file import Trainer, TrainerRaised


def objectives(trainer: Trainer) -> dict[str, Any]:
    """The file's callables as core.coupled_objectives takes them, each through trainer.call
    (an exception names the user's line)."""

    def wrap(name: str) -> Callable[..., Any] | None:
        return (lambda *args: trainer.call(name, *args)) if trainer.has(name) else None

    return {n: wrap(n) for n in ("batch_loss", "embed", "embedding_loss")}


def global_loss(trainer: Trainer) -> co.BatchLoss:
    """batch_loss, or embedding_loss of the concatenated embeddings without one."""
    given = objectives(trainer)
    if given["batch_loss"] is not None:
        loss: co.BatchLoss = given["batch_loss"]
        return loss
    return co.embedding_batch_loss(given["embed"], given["embedding_loss"])


def reference_update(trainer: Trainer, batches: list[list[Batch]], device: str) -> probe.Reference:
    """A fresh model and the file's optimizer stepped on the global-batch objective, its
    gradient norm clipped once to MAX_GRAD_NORM when set. Below float64 a second model takes
    the microbatches in reverse order: the reference's own rounding (its floor)."""
    model = probe.build(trainer, device)
    initial = probe.snapshot(model, torch.optim.SGD(model.parameters(), lr=0.0))
    optimizer = probe.make_optimizer(trainer, model)
    _reference_step(trainer, model, optimizer, batches)
    final = probe.snapshot(model, optimizer)
    reordered = final
    if trainer.dtype != "float64":
        other = probe.build(trainer, device)
        other_optimizer = probe.make_optimizer(trainer, other)
        _reference_step(trainer, other, other_optimizer, [row[::-1] for row in batches[::-1]])
        reordered = probe.snapshot(other, other_optimizer)
    return probe.Reference(initial, final, probe.floor(reordered, final, trainer.dtype))


def _reference_step(
    trainer: Trainer, model: torch.nn.Module, optimizer: Any, batches: list[list[Batch]]
) -> None:
    grid = [[probe.on_device(b, model) for b in row] for row in batches]
    optimizer.zero_grad(set_to_none=True)
    co.pool_objective("global_batch", global_loss(trainer), model, grid).backward()
    if trainer.max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), trainer.max_grad_norm)
    optimizer.step()


def preflight(trainer: Trainer, device: str, rank: int, steps: RankSteps) -> list[Diagnosis]:
    """build_model deterministic (twice, and on every rank) and in DTYPE; the objective a
    finite scalar on two microbatches of 2 items. Every rank returns the same verdict."""
    import torch.distributed as dist

    found: list[Diagnosis] = []
    first, second = probe.build(trainer, device), probe.build(trainer, device)
    a, b = first.state_dict(), second.state_dict()
    name = next((n for n, t in a.items() if n not in b or not _same(t, b[n])), None)
    if name is not None:
        found.append(diagnoses.model_not_deterministic(name, None, across_ranks=False))
    floating = {n: t.detach().double() for n, t in a.items() if t.is_floating_point()}
    if steps.rank_spread(floating, probe.device_of(device)) != 0.0 and not found:
        found.append(diagnoses.model_not_deterministic(next(iter(floating), "?"), None, True))
    wrong = probe.first_not_in(dict(first.named_parameters()), trainer.dtype)
    if wrong and not found:
        found.append(diagnoses.dtype_built(wrong[0], wrong[1], trainer.dtype))
    if not found:
        batches = probe.scenario_batches(trainer, "preflight", [[2], [2]])
        grid = [[probe.on_device(b, first) for b in row] for row in batches]
        try:
            co.pool_objective("global_batch", global_loss(trainer), first, grid)
        except ValueError as exc:  # core's InvalidInput: not a scalar, not finite, bad rows
            found.append(objective_invalid(str(exc)))
    flag = torch.tensor([float(bool(found))], device=probe.device_of(device))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() and not found:
        found.append(diagnoses.elsewhere())
    return found


def _same(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.shape == y.shape and bool(torch.equal(x, y))


def check_scenario(
    trainer: Trainer,
    name: str,
    sizes: Sequence[Sequence[int]],
    tolerance: float,
    rank: int,
    device: str,
    steps: RankSteps,
) -> RankScenario:
    """This rank's evidence on one scenario (coupled_report judges the ranks together): the
    global-batch reference, then the token mode's steps in its order (probe.judge_scenario)."""
    batches = probe.scenario_batches(trainer, name, sizes)
    reference = reference_update(trainer, batches, device)
    named = {"name": name, "sizes": [list(row) for row in sizes]}
    return probe.judge_scenario(
        trainer, batches, reference, named, (tolerance, rank, device), steps, solve
    )


def solve(
    trainer: Trainer, batches: list[list[Batch]], delta: torch.Tensor, device: str
) -> dict[str, Any]:
    """The scheme behind `delta` (flat, named_parameters order): each candidate's gradient at
    the initial weights (a candidate whose callables raise is left out, with why), the
    change over the reference's clip coefficient, and core.coupled_schemes.solve_schemes."""
    model = probe.build(trainer, device)
    grid = [[probe.on_device(b, model) for b in row] for row in batches]
    given = objectives(trainer)
    names = co.NAMED_SCHEMES if given["embed"] else co.POOL_SCHEMES
    grads: dict[str, co.Gradient] = {}
    left_out: dict[str, str] = {}
    for scheme in names:
        try:
            grads[scheme] = co.candidate_gradient(scheme, model, grid, **given)
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


def check_trainer(
    trainer: Trainer,
    accum: int,
    counts: Grid | None,
    tolerance: float,
    where: tuple[int, int, str],
    units: tuple[int, guard.Units],
    steps: RankSteps,
) -> dict[str, Any]:
    """This rank's output for one coupled trainer file (the token mode's keys, plus mode):
    its scenarios run as the token mode's are (guard.run_units: each alone, progress lines
    for the launch layer's relaunch after a rank died). `where`: this rank, P, --device."""
    rank, world, device = where
    grids = scenario_sizes(world, accum) if counts is None else {"custom": checked_counts(counts)}
    header: dict[str, Any] = {
        "trainer": str(trainer.path),
        "mode": "coupled",
        "skipped": [],
        "dtype": trainer.dtype,
        "max_grad_norm": trainer.max_grad_norm,
        "device": device,
    }
    found, scenarios = guard.run_units(
        (units[1], rank, units[0]),
        (header, "sizes"),
        grids,
        lambda: preflight(trainer, device, rank, steps),
        lambda name, sizes: check_scenario(trainer, name, sizes, tolerance, rank, device, steps),
        device,
    )
    return {**header, "scenarios": scenarios, "diagnoses": found, "units": len(grids)}
