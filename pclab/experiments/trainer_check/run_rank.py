"""The run mode on a rank: the file's own train_loop over epochs against the one-process run
(run_reference.py), update by update.

Per scenario every rank builds every rank's microbatches of every epoch, runs the reference
(and once more summed in reverse, for its floor), then the file's train_loop on a fresh model
and optimizer while run_observe.Observer records each optimizer step (the rate it used, the
parameters before and after) and the model's forwards; each step is compared with the
reference's update of the same index and placed in the window it closes. The loop runs again
with SGD at learning rate 1 and rank 0 solves each of those steps, its observed rate divided
out, for the weight of every microbatch consumed in its epoch so far and the previous epoch's
last window (run_solve.py): the window's own scheme, and any gradient leaked from an earlier
window. The schedule is judged against the file's make_scheduler stepped as each mistake
steps it (run_schedule.py).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

import pclab.experiments.trainer_check.microbatches as microbatches
import pclab.experiments.trainer_check.run_contract as run_contract
import pclab.experiments.trainer_check.run_reference as run_reference
import pclab.experiments.trainer_check.run_schedule as run_schedule
import pclab.experiments.trainer_check.run_solve as run_solve
import pclab.experiments.trainer_check.token_rank as token_rank
from pclab.experiments.trainer_check.mode_protocols import Grid
from pclab.experiments.trainer_check.pipeline import (
    Scenario,
    build,
    make_optimizer,
    model_parameters,
    scenario_tolerance,
    snapshot,
)
from pclab.experiments.trainer_check.run_observe import Observer, Step, fingerprint
from pclab.experiments.trainer_check.run_reference import Epochs, Update, Window
from pclab.experiments.trainer_check.run_scenarios import (
    EPOCHS,
    scenario_counts,
)
from pclab.experiments.trainer_check.states import (
    State,
    compare,
    device_of,
    first_non_finite,
    first_not_in,
    floor,
    rank_spread,
)
from pclab.experiments.trainer_check.trainer_file import Trainer

SHAPE = "label_positions"  # a scenario's grid: [rank][epoch][microbatch] counted labels


def scenarios(
    trainer: Trainer, world: int, accum: int, counts: Grid | None, given: str
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The run scenarios (run_scenarios.py); --counts is one update's, not a run's."""
    if counts is not None:
        raise ValueError(
            "--counts gives one update's counts: a train_loop file is checked over its own "
            "epochs (run_scenarios.py); leave --counts out"
        )
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
    model = build(trainer, device)
    world = len(epochs[0])
    return [
        [[len(token_rank.terms(trainer, model, b)) for b in epoch[r]] for epoch in epochs]
        for r in range(world)
    ]


def _loop_input(trainer: Trainer, epochs: Epochs, rank: int, model: torch.nn.Module) -> Any:
    """What train_loop is handed: this rank's epochs (or, GLOBAL_BATCH, every rank's)."""
    on = microbatches.on_device
    if trainer.global_batch:
        return [[[on(b, model) for b in rows] for rows in epoch] for epoch in epochs]
    return [[on(b, model) for b in epoch[rank]] for epoch in epochs]


def _positions(trainer: Trainer, epochs: Epochs, model: torch.nn.Module) -> dict[bytes, int]:
    """Every microbatch's input fingerprint -> its index in the run (from 1), the same index
    on every rank (the observer tells which one the loop just ran)."""
    m = len(epochs[0][0])
    found: dict[bytes, int] = {}
    for e, epoch in enumerate(epochs):
        for rows in epoch:
            for j, batch in enumerate(rows):
                tensors = [t for t in batch.values() if isinstance(t, torch.Tensor)]
                key = fingerprint((tensors[0],), {}) if tensors else None
                if key is not None:
                    found.setdefault(key, e * m + j + 1)
    return found


@contextmanager
def shared_folder(rank: int) -> Iterator[str]:
    """A fresh, empty folder every rank sees (made by rank 0 on this host, its name
    broadcast), removed afterwards: a resumable loop's checkpoint_dir for one run."""
    import torch.distributed as dist

    made = [tempfile.mkdtemp(prefix="pcl_checkpoint_") if rank == 0 else None]
    dist.broadcast_object_list(made, src=0)
    try:
        yield str(made[0])
        # every rank's loop has ended, its last save written, before the folder goes: a rank
        # still saving (Accelerate's save_state after the last batch) found it gone (measured:
        # a false not_resumable, "step_10 does not exist", once in a few runs)
        dist.barrier()
    finally:
        if rank == 0:
            shutil.rmtree(str(made[0]), ignore_errors=True)


def user_run(
    trainer: Trainer, epochs: Epochs, rank: int, accum: int, device: str, sgd: bool = False
) -> tuple[list[Step], State, State]:
    """The file's train_loop on a fresh model, watched: (its steps, its final state, its
    parameters as the loop left them); `sgd`: SGD at learning rate 1 for the file's optimizer.
    A resumable loop gets an empty checkpoint_dir of its own: a run from the start."""
    if run_contract.resumable(trainer.module):
        with shared_folder(rank) as folder:
            return watched_run(trainer, epochs, rank, accum, device, sgd, folder)
    return watched_run(trainer, epochs, rank, accum, device, sgd)


def watched_run(
    trainer: Trainer,
    epochs: Epochs,
    rank: int,
    accum: int,
    device: str,
    sgd: bool = False,
    checkpoint_dir: str | None = None,
    observer: type[Observer] = Observer,
) -> tuple[list[Step], State, State]:
    """user_run's run: `checkpoint_dir` the resumable loop's folder; `observer` the
    Observer (a resume launch's records each step as it goes, and may kill the rank)."""
    model = build(trainer, device)
    if sgd:
        optimizer: Any = torch.optim.SGD(model.parameters(), lr=1.0)
    else:
        optimizer = make_optimizer(trainer, model)
    if trainer.has("fresh_start"):
        trainer.call("fresh_start")
    given = _loop_input(trainer, epochs, rank, model)
    folder = () if checkpoint_dir is None else (checkpoint_dir,)
    with observer(trainer, model, _positions(trainer, epochs, model)) as seen:
        trainer.call("train_loop", model, optimizer, given, accum, *folder)
    named = model_parameters(trainer, model, stepped_by_user=True)
    final = snapshot(model, optimizer, named, with_optimizer=bool(seen.steps))
    return seen.steps, final, named


def _placed(steps: list[Step], run_windows: list[Window]) -> list[int | None]:
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
            gap, first = compare(step.after, want, tolerance)
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


def check_scenario(
    trainer: Trainer, scenario: Scenario, at: tuple[float, int, str]
) -> dict[str, Any]:
    """This rank's evidence on one run scenario (run_report.py judges the ranks together)."""
    tolerance, rank, device = at
    accum = scenario.accum
    epochs = run_epochs(trainer, scenario.name, scenario.grid)
    terms = run_terms(trainer, epochs, device)
    run_windows = run_reference.windows(epochs, accum, terms)
    initial, updates = run_reference.run(trainer, epochs, run_windows, device)
    _, reordered = run_reference.run(trainer, epochs, run_windows, device, reverse=True)
    floors = [
        floor(b.state, a.state, trainer.dtype)
        for a, b in zip(updates, reordered)
        if a.state is not None and b.state is not None
    ]
    own_floor = None if not floors or None in floors else max(f for f in floors if f is not None)
    tolerance = scenario_tolerance(tolerance, own_floor)
    steps, final, named = user_run(trainer, epochs, rank, accum, device)
    placed = _placed(steps, run_windows)
    entries = _compared(steps, updates, placed, initial, tolerance)
    counted = torch.tensor([float(len(steps)), -float(len(steps))], dtype=torch.float64)
    import torch.distributed as dist

    dist.all_reduce(counted, op=dist.ReduceOp.MAX)
    taken = [u for u in updates if u.state is not None]
    want = taken[-1].state if taken and taken[-1].state is not None else initial
    gap, first = compare(final, want, tolerance)
    evidence: dict[str, Any] = {
        "name": scenario.name,
        SHAPE: [[list(epoch) for epoch in row] for row in scenario.grid],
        "counts": terms,
        "updates": entries,
        "steps": len(steps),
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
    sgd_steps, _, _ = user_run(trainer, epochs, rank, accum, device, sgd=True)
    if rank == 0:  # one rank solves; every rank took part in the collectives above
        evidence["solved"] = run_solve.solve(trainer, epochs, terms, run_windows, sgd_steps, device)
    return evidence
