"""The coupled run mode on a rank: a coupled file's own train_loop over epochs against the
one-process run whose every window is one update on the file's objective over every rank's
items of that window (the global pool), update by update.

The steps are the run mode's (run_rank.checked): the same epochs, windows, reference, watched
loop, comparison and schedule; what differs is here. A window's N is its items (never 0: no
window is skipped). The loop's steps are placed by the microbatches the model ran: a microbatch
of tensors is recognised by any of its tensors (a loop that embeds queries and documents apart
runs the model twice on one microbatch); one of texts (a framework tokenizes them itself) by
the count of forwards, when the model ran every microbatch the same number of times
(ItemObserver). Rank 0 names each step of the loop's SGD replay by the pool it optimised: the
coupled mode's solve (coupled_rank.solve: every candidate pool's gradient at the parameters
the step started from, over that window's items) with the step's observed rate divided out.

    pclab check examples/trainers/run_coupled_naive.py --json
"""

from __future__ import annotations

from typing import Any

import torch

import pclab.experiments.trainer_check.coupled_rank as coupled_rank
import pclab.experiments.trainer_check.run_loop as run_loop
import pclab.experiments.trainer_check.run_rank as run_rank
from pclab.core import coupled_objectives as co
from pclab.experiments.trainer_check.coupled_run_contract import COUNTS_REFUSED, items
from pclab.experiments.trainer_check.coupled_run_observe import ItemObserver, observing, own_inputs
from pclab.experiments.trainer_check.coupled_scenarios import SIZES
from pclab.experiments.trainer_check.mode_protocols import Batch, Grid
from pclab.experiments.trainer_check.pipeline import Scenario
from pclab.experiments.trainer_check.run_observe import Step
from pclab.experiments.trainer_check.run_reference import Epochs, Window
from pclab.experiments.trainer_check.run_scenarios import EPOCHS, microbatches_per_epoch
from pclab.experiments.trainer_check.run_solve import held_at
from pclab.experiments.trainer_check.states import State
from pclab.experiments.trainer_check.trainer import Trainer, on_device

SHAPE = "sizes"  # a scenario's grid: [rank][epoch][microbatch] items
EQUAL_ITEMS = 3  # items of every microbatch in "equal_items" (without ITEMS)
RunGrid = tuple[tuple[tuple[int, ...], ...], ...]


def scenario_sizes(world: int, accum: int, fixed: int | None) -> dict[str, RunGrid]:
    """{name: [rank][epoch][microbatch] items}: M = 2K + 1 microbatches an epoch (windows of
    K and a tail of one), every rank holding as many items at a microstep as the others (a
    gather pairs them up).

        uneven_items  the items vary from one microstep to the next (coupled_scenarios.SIZES,
                      shifted by the epoch): the pools of every scheme differ in size
        equal_items   EQUAL_ITEMS in every microbatch (ITEMS: the only scenario, of ITEMS)
    """
    m = microbatches_per_epoch(accum)

    def grid(size: Any) -> RunGrid:
        return tuple(
            tuple(tuple(size(e, j) for j in range(m)) for e in range(EPOCHS)) for _ in range(world)
        )

    if fixed is not None:
        return {"equal_items": grid(lambda e, j: fixed)}
    return {
        "uneven_items": grid(lambda e, j: SIZES[(j + e) % len(SIZES)]),
        "equal_items": grid(lambda e, j: EQUAL_ITEMS),
    }


def scenarios(
    trainer: Trainer, world: int, accum: int, counts: Grid | None, given: str
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The coupled run scenarios; --counts is one update's, not a run's."""
    if counts is not None:
        raise ValueError(COUNTS_REFUSED)
    return dict(scenario_sizes(world, accum, items(trainer.module))), []


def header(trainer: Trainer, counts: Grid | None, given: str) -> dict[str, Any]:
    return {
        "epochs": EPOCHS,
        "scheduler": trainer.has("make_scheduler"),
        "items": items(trainer.module),
    }


preflight = coupled_rank.preflight  # the objective a finite scalar, as in the coupled mode


def sizes(trainer: Trainer, epochs: Epochs, device: str) -> list[list[list[int]]]:
    """[rank][epoch][microbatch] items: the N of the run's windows."""
    world = len(epochs[0])
    return [[[_items(b) for b in epoch[r]] for epoch in epochs] for r in range(world)]


def _items(batch: Batch) -> int:
    """A microbatch's items: the length of its first column (make_microbatch made n)."""
    first = next(iter(batch.values()))
    return len(first)


def window_loss(
    trainer: Trainer, model: torch.nn.Module, cells: list[list[Batch]], n: int, reverse: bool
) -> torch.Tensor:
    """The window's objective over every rank's items of it, pooled ([rank][microbatch],
    rank-major); `reverse`: ranks and microbatches in the opposite order (the same pool,
    another order of its sums: the reference's floor below float64)."""
    grid = [[on_device(b, model) for b in row] for row in cells]
    if reverse:
        grid = [row[::-1] for row in grid[::-1]]
    return co.pool_objective("global_batch", coupled_rank.global_loss(trainer), model, grid)


def watched(
    trainer: Trainer,
    epochs: Epochs,
    rank: int,
    accum: int,
    device: str,
    sgd: bool = False,
    start: int = 0,
) -> tuple[list[Step], State, State]:
    """run_loop.user_run for a coupled loop: watched by ItemObserver."""
    return run_loop.user_run(
        trainer, epochs, rank, accum, device, sgd, start, observer=observing(epochs)
    )


def solve(
    trainer: Trainer,
    epochs: Epochs,
    run_sizes: list[list[list[int]]],
    run_windows: list[Window],
    at: tuple[int, int, str],
) -> list[dict[str, Any]] | None:
    """Rank 0's name for each step of the loop's SGD replay (None on the other ranks, which
    take part in its collectives): the pool it optimised, over its window's items at the
    parameters it started from, its observed rate divided out (coupled_rank.solve)."""
    rank, accum, device = at
    steps = watched(trainer, epochs, rank, accum, device, sgd=True)[0]
    if rank != 0:
        return None
    model = trainer.build(device)
    names = [n for n, _ in model.named_parameters()]
    placed = run_rank.placed_steps(steps, run_windows)
    found: list[dict[str, Any]] = []
    for j, (step, w) in enumerate(zip(steps, placed)):
        lr = step.lrs[0] if step.lrs else 0.0
        if w is None or not lr:
            found.append({"step": j, "window": w, "scheme": None})
            continue
        window = run_windows[w]
        cells = [list(row[window.start : window.end]) for row in epochs[window.epoch]]
        at = held_at(model, step.before)
        named = coupled_rank.solve(trainer, cells, step.change(names) / lr, at)
        found.append({"step": j, "window": w, "lr": lr, **named})
    return found


def resume_scenario(trainer: Trainer, world: int, accum: int) -> tuple[str, Any]:
    """The scenario a resume check replays: the first (uneven_items; equal_items with ITEMS)."""
    return next(iter(scenario_sizes(world, accum, items(trainer.module)).items()))


OBJECTIVE = run_rank.Objective(
    shape=SHAPE,
    sizes=sizes,
    window_loss=window_loss,
    reorders=coupled_rank.reorders,
    user_run=watched,
    solve=solve,
    resume_scenario=resume_scenario,
    observer=ItemObserver,
    observing=lambda epochs, kind, learned: observing(epochs, kind, learned),
    own_inputs=own_inputs,
)


def check_scenario(
    trainer: Trainer, scenario: Scenario, at: tuple[float, int, str]
) -> dict[str, Any]:
    """This rank's evidence on one coupled run scenario (coupled_run_report.py judges)."""
    return run_rank.checked(trainer, scenario, at, OBJECTIVE)
