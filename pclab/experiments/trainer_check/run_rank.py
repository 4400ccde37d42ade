"""The run mode on a rank: the file's own train_loop over epochs against the one-process run
(run_reference.py), update by update.

Per scenario every rank builds every rank's microbatches of every epoch, runs the reference
(and once more summed in reverse, for its floor), then the file's train_loop on a fresh model
and optimizer (run_loop.py) while run_observe.Observer records each optimizer step (the rate it
used, the parameters before and after) and the model's forwards; each step is compared with the
reference's update of the same index and placed in the window it closes. The loop runs again
with SGD at learning rate 1 and rank 0 solves each of those steps, its observed rate divided
out, for the weight of every microbatch consumed in its epoch so far and the previous epoch's
last window (run_solve.py): the window's own scheme, and any gradient leaked from an earlier
window (from more starting points where one replay cannot tell them apart). The schedule is
judged against the file's make_scheduler stepped as each mistake steps it (run_schedule.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import pclab.experiments.trainer_check.microbatches as microbatches
import pclab.experiments.trainer_check.run_reference as run_reference
import pclab.experiments.trainer_check.run_schedule as run_schedule
import pclab.experiments.trainer_check.run_solve as run_solve
import pclab.experiments.trainer_check.token_rank as token_rank
from pclab.experiments.trainer_check.judging import SOLVE_RTOL
from pclab.experiments.trainer_check.mode_protocols import Grid
from pclab.experiments.trainer_check.pipeline import Scenario, scenario_tolerance
from pclab.experiments.trainer_check.run_contract import COUNTS_REFUSED
from pclab.experiments.trainer_check.run_loop import ObserverFactory, user_run
from pclab.experiments.trainer_check.run_observe import Observer, Step, state_read
from pclab.experiments.trainer_check.run_reference import (
    Epochs,
    Update,
    Window,
    WindowLoss,
    token_window_loss,
)
from pclab.experiments.trainer_check.run_scenarios import (
    EPOCHS,
    scenario_counts,
)
from pclab.experiments.trainer_check.states import (
    State,
    compare,
    first_non_finite,
    first_not_in,
    floor,
    rank_spread,
    readable,
)
from pclab.experiments.trainer_check.trainer import Trainer, device_of

SHAPE = "label_positions"  # a scenario's grid: [rank][epoch][microbatch] counted labels


def scenarios(
    trainer: Trainer, world: int, accum: int, counts: Grid | None, given: str
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The run scenarios (run_scenarios.py); --counts is one update's, not a run's."""
    if counts is not None:
        raise ValueError(COUNTS_REFUSED)
    return dict(scenario_counts(world, accum, trainer.capacity)), []


def header(trainer: Trainer, counts: Grid | None, given: str) -> dict[str, Any]:
    return {"epochs": EPOCHS, "scheduler": trainer.has("make_scheduler")}


preflight = token_rank.preflight  # one term per counted label, as in the token mode


def run_epochs(trainer: Trainer, name: str, grid: Sequence[Sequence[Sequence[int]]]) -> Epochs:
    """[epoch][rank][microbatch]: every rank's microbatches, seeded by (scenario, rank, the
    microbatch's index in the run), the same on every rank."""
    m = len(grid[0][0])
    return [
        [
            [microbatches.microbatch(trainer, name, r, e * m + j, n) for j, n in enumerate(row[e])]
            for r, row in enumerate(grid)
        ]
        for e in range(len(grid[0]))
    ]


def run_terms(trainer: Trainer, epochs: Epochs, device: str) -> list[list[list[int]]]:
    """[rank][epoch][microbatch] terms token_losses returns (a causal shift drops some)."""
    model = trainer.build(device)
    world = len(epochs[0])
    return [
        [[len(token_rank.terms(trainer, model, b)) for b in epoch[r]] for epoch in epochs]
        for r in range(world)
    ]


def placed_steps(steps: list[Step], run_windows: list[Window]) -> list[int | None]:
    """Each step's window: the one whose microbatches the last forward before it belongs to."""
    found: list[int | None] = []
    for step in steps:
        at = next(
            (
                i
                for i, w in enumerate(run_windows)
                if w.first_forward < step.forwards <= w.first_forward + w.microsteps
            ),
            None,
        )
        found.append(at)
    return found


def _compared(
    steps: list[Step],
    updates: list[Update],
    placed: list[int | None],
    initial: State,
    tolerance: float,
) -> list[dict[str, Any]]:
    """One entry per window of the run: the loop's last step in it against the reference's
    update of it (a skipped window: against the state before it, so that a step there must
    change nothing); a window with labels and no step of the loop's diverges ("no step")."""
    entries = []
    before = initial
    for at, update in enumerate(updates):
        w = update.window
        mine = [step for step, p in zip(steps, placed) if p == at]
        step = mine[-1] if mine else None
        want = before if update.state is None else update.state
        gap: float | None = None
        first: Any = None
        if step is not None:
            gap, first = compare(step.after, readable(want, step.state_read), tolerance)
        elif update.state is not None:
            first = {"tensor": None, "abs_diff": None, "why": "no step"}
        before = want
        entries.append(
            {
                "epoch": w.epoch,
                "window": w.index,
                "microsteps": w.microsteps,
                "num_valid_labels": w.num_valid_labels,
                "skipped": update.state is None,
                "lr_intended": None if update.lrs is None else update.lrs[0],
                "lr_yours": None if step is None else step.lrs[0],
                "optimizer_steps": len(mine),
                "max_abs_diff": gap,
                "first_divergence": first,
            }
        )
    return entries


Solver = Callable[
    [Trainer, Epochs, list[list[list[int]]], list[Window], tuple[int, int, str]],
    list[dict[str, Any]] | None,
]


@dataclass(frozen=True)
class Objective:
    """What one kind of run file optimises, and how its steps are watched and solved: the
    token mean (OBJECTIVE, below) or a coupled loop's global pool (coupled_run_rank)."""

    shape: str  # the key of a scenario's grid in its evidence
    sizes: Callable[[Trainer, Epochs, str], list[list[list[int]]]]  # N of each microbatch
    window_loss: WindowLoss
    reorders: Callable[[str], bool]  # the reference run again in reverse, for its floor
    user_run: Callable[..., tuple[list[Step], State, State]]  # as run_loop.user_run
    solve: Solver  # rank 0's names for the loop's steps (None on the other ranks)
    # what a resume check (resume_worker.py) needs besides: the scenario it replays, the
    # observer a launch's own observer extends, what makes it for a run (given what the
    # loop's own inputs are), and those inputs, from one run where the check's are not they
    resume_scenario: Callable[[Trainer, int, int], tuple[str, Any]]
    observer: type[Observer]
    observing: Callable[[Epochs, Any, dict[bytes, int]], ObserverFactory]
    own_inputs: Callable[[Trainer, Epochs, int, int, str], dict[bytes, int]]


def check_scenario(
    trainer: Trainer, scenario: Scenario, at: tuple[float, int, str]
) -> dict[str, Any]:
    """This rank's evidence on one run scenario (run_report.py judges the ranks together)."""
    return checked(trainer, scenario, at, OBJECTIVE)


def checked(
    trainer: Trainer, scenario: Scenario, at: tuple[float, int, str], objective: Objective
) -> dict[str, Any]:
    """check_scenario for the run of `objective`'s kind of file."""
    tolerance, rank, device = at
    accum = scenario.accum
    epochs = run_epochs(trainer, scenario.name, scenario.grid)
    terms = objective.sizes(trainer, epochs, device)
    run_windows = run_reference.windows(epochs, accum, terms)
    reference = functools.partial(
        run_reference.run, trainer, epochs, run_windows, device, window_loss=objective.window_loss
    )
    initial, updates = reference()
    reordered = reference(reverse=True)[1] if objective.reorders(trainer.dtype) else []
    floors = [
        floor(b.state, a.state, trainer.dtype)
        for a, b in zip(updates, reordered)
        if a.state is not None and b.state is not None
    ]
    own_floor = None if not floors or None in floors else max(f for f in floors if f is not None)
    tolerance = scenario_tolerance(tolerance, own_floor)
    steps, final, named = objective.user_run(trainer, epochs, rank, accum, device)
    placed = placed_steps(steps, run_windows)
    entries = _compared(steps, updates, placed, initial, tolerance)
    counted = torch.tensor([float(len(steps)), -float(len(steps))], dtype=torch.float64)
    import torch.distributed as dist

    dist.all_reduce(counted, op=dist.ReduceOp.MAX)
    taken = [u for u in updates if u.state is not None]
    want = taken[-1].state if taken and taken[-1].state is not None else initial
    read = state_read(steps)
    gap, first = compare(final, readable(want, read), tolerance)
    evidence: dict[str, Any] = {
        "name": scenario.name,
        objective.shape: [[list(epoch) for epoch in row] for row in scenario.grid],
        "counts": terms,
        "updates": entries,
        "steps": len(steps),
        "optimizer_state_read": read,  # False: compared on the parameters alone
        "unplaced": sum(1 for p in placed if p is None),
        "reference_steps": len(taken),
        "steps_agree": bool(counted[0] == -counted[1]),
        "max_abs_diff": gap,
        "first_divergence": first,
        "spread": rank_spread(final, device_of(device)),
        "tolerance": tolerance,
        "floor": own_floor,
        "dtype_after": first_not_in(named, trainer.dtype),
        "non_finite": first_non_finite(final),
        "schedule": run_schedule.judged(trainer, steps, updates, run_windows, scenario),
    }
    solved = objective.solve(trainer, epochs, terms, run_windows, (rank, accum, device))
    if solved is not None:  # rank 0
        evidence["solved"] = solved
    return evidence


def _solved(
    trainer: Trainer,
    epochs: Epochs,
    terms: list[list[list[int]]],
    run_windows: list[Window],
    at: tuple[int, int, str],
) -> list[dict[str, Any]] | None:
    """Rank 0's solve of the loop's SGD replay (None on the other ranks, which take part in
    its collectives). Where one replay cannot tell a step's weights apart (fewer parameters
    than candidate microbatches), rank 0 says so and every rank replays from
    run_solve.STARTS - 1 other starting points; their steps, placed alike, are solved
    together. A loop that places them differently keeps the first solve."""
    import torch.distributed as dist

    rank, accum, device = at
    runs = [user_run(trainer, epochs, rank, accum, device, sgd=True)[0]]
    solve = functools.partial(run_solve.solve, trainer, epochs, terms, run_windows)
    found = solve(runs, device) if rank == 0 else None
    again = [run_solve.underdetermined(found)]
    dist.broadcast_object_list(again, src=0)
    if not again[0]:
        return found
    runs += [
        user_run(trainer, epochs, rank, accum, device, sgd=True, start=s)[0]
        for s in range(1, run_solve.STARTS)
    ]
    if rank == 0 and run_solve.same_placement(runs, run_windows):
        found = solve(runs, device, SOLVE_RTOL[trainer.dtype])
    return found


def resume_scenario(trainer: Trainer, world: int, accum: int) -> tuple[str, Any]:
    """The run scenario a resume check replays: uneven, every window with labels."""
    return "uneven", scenario_counts(world, accum, trainer.capacity)["uneven"]


OBJECTIVE = Objective(
    shape=SHAPE,
    sizes=run_terms,
    window_loss=token_window_loss,
    reorders=lambda dtype: True,  # a sum of terms: reversed term by term
    user_run=user_run,
    solve=_solved,
    resume_scenario=resume_scenario,
    observer=Observer,
    observing=lambda epochs, kind, learned: kind,  # the class itself, placing by its inputs
    own_inputs=lambda trainer, epochs, rank, accum, device: {},
)
