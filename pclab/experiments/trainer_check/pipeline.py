"""The trainer check's scenario pipeline on a rank: the steps every mode shares, in order.

Per trainer file, every rank first runs `preflight` (build_model deterministic on two calls
and across ranks, in DTYPE; then the mode's own contract checks). Per scenario
(`check_scenario`), every rank
    1. builds every cell's microbatch, P x K, the same on every rank (mode.batches), and
       steps a fresh model on the mode's reference objective over the whole grid
       (mode.reference_loss) in this process alone, and once more on the reversed grid for
       its floor (`reference_update`, each update one `reference_step`);
    2. steps another fresh model with the file's train_step on its own K microbatches (or
       every rank's, GLOBAL_BATCH) with the file's optimizer (`user_update`) and compares
       every parameter and optimizer-state tensor with the reference (`compare_updates`),
       the ranks' spread all-reduced (`rank_spread`);
    3. runs train_step again with SGD at learning rate 1 (`sgd_delta`); rank 0 asks the mode
       what that change optimised from a fresh model (mode.solve: each microbatch's weight,
       or a scheme).
Every rank runs every step: the user's collectives and the check's pair up. A mode supplies
only its reference objective, its solve and its scenario shapes (mode_protocols.RankMode);
guard.run_units runs each scenario alone (worker.check_trainer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch

import pclab.experiments.trainer_check.diagnoses as diagnoses
import pclab.experiments.trainer_check.states as states
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.mode_protocols import (
    Batch,
    Grid,
    RankMode,
    RankSide,
    ReferenceLoss,
    RunMode,
)
from pclab.experiments.trainer_check.states import (
    State,
    compare,
    device_of,
    extra_state,
    first_non_finite,
    first_not_in,
    floor,
    rank_spread,
    readable,
    same_state,
    snapshot,
)
from pclab.experiments.trainer_check.trainer_file import Trainer

FLOOR_FACTOR = 10  # tolerance >= this x the reference's own floor (states.floor)


@dataclass(frozen=True)
class Reference:
    """The single-process reference of one scenario (the same on every rank)."""

    initial: State  # the fresh model's parameters, before any step
    final: State  # its parameters and optimizer state after the reference step
    floor: float | None  # its own precision floor in DTYPE (see `floor`)


def preflight(trainer: Trainer, mode: RankSide, device: str) -> list[Diagnosis]:
    """The contract checks that run the file's own code, before any scenario, on every rank:
    build_model twice (and on every rank) the same, in DTYPE; then the mode's own (one term
    per counted label, a finite objective). Every rank returns the same verdict (a MAX
    all-reduce of "found one")."""
    import torch.distributed as dist

    found: list[Diagnosis] = []
    first, second = trainer.build(device), trainer.build(device)
    a, b = first.state_dict(), second.state_dict()
    for name, tensor in a.items():
        other = b.get(name)
        if other is None or other.shape != tensor.shape or not torch.equal(other, tensor):
            same_shape = other is not None and other.shape == tensor.shape
            gap = float((other.double() - tensor.double()).abs().max()) if same_shape else None
            found.append(diagnoses.model_not_deterministic(name, gap, across_ranks=False))
            break
    floating = {n: t.detach().double() for n, t in a.items() if t.is_floating_point()}
    if rank_spread(floating, device_of(device)) != 0.0 and not found:  # every rank joins
        name = next(iter(floating), "the parameters")
        found.append(diagnoses.model_not_deterministic(name, None, across_ranks=True))
    wrong = first_not_in(dict(first.named_parameters()), trainer.dtype)
    if wrong and not found:
        found.append(diagnoses.dtype_built(wrong[0], wrong[1], trainer.dtype))
    if not found:
        found.extend(mode.preflight(trainer, first))
    flag = torch.tensor([float(bool(found))], device=device_of(device))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() and not found:  # another rank found one: this rank stops with it
        found.append(diagnoses.elsewhere())
    return found


def reference_step(
    trainer: Trainer,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor | None,
) -> None:
    """The reference's one update on `loss` (None: nothing to average, no step), in every
    mode: gradients zeroed, `loss` differentiated, the global gradient norm clipped once to
    MAX_GRAD_NORM when the file sets one (as torch.nn.utils.clip_grad_norm_ does it:
    coefficient max / (norm + 1e-6), at most 1), the file's optimizer stepped."""
    if loss is None:
        return
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if trainer.max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), trainer.max_grad_norm)
    optimizer.step()


def reference_update(
    trainer: Trainer, loss: ReferenceLoss, reordered_loss: ReferenceLoss | None, device: str
) -> Reference:
    """The update the user's step must match: a fresh model and the file's optimizer stepped on
    the mode's reference objective over the whole grid, in this process alone. Where the mode
    asks (mode.reorders), a second fresh model takes the same step on the grid reversed
    (`reordered_loss`): how far the two land apart is the reference's own rounding,
    which the tolerance must not go below."""
    model = trainer.build(device)
    initial = snapshot(model, torch.optim.SGD(model.parameters(), lr=0.0))
    optimizer = trainer.make_optimizer(model)
    reference_step(trainer, model, optimizer, loss(model))
    final = snapshot(model, optimizer)
    reordered = final
    if reordered_loss is not None:
        other = trainer.build(device)
        other_optimizer = trainer.make_optimizer(other)
        reference_step(trainer, other, other_optimizer, reordered_loss(other))
        reordered = snapshot(other, other_optimizer)
    return Reference(initial, final, floor(reordered, final, trainer.dtype))


def scenario_tolerance(tolerance: float, own_floor: float | None) -> float:
    """--tolerance, raised to FLOOR_FACTOR x the reference's own floor: a step cannot be asked
    to match the reference closer than the reference matches itself (float32, bfloat16)."""
    return tolerance if own_floor is None else max(tolerance, FLOOR_FACTOR * own_floor)


@dataclass(frozen=True)
class UserUpdate:
    """What the file's own train_step did to a fresh model on this rank."""

    parameters: State  # by name, as the step left them (full_parameters when the file has it)
    state: State  # parameters as float64, and optimizer state when any rank's optimizer stepped
    steps: int | None  # optimizer.step() calls, most on any rank (None: none could be counted)
    state_read: bool = True  # False: some rank's optimizer stepped none of the model's
    # parameters (a wrapper's flat partitions): the update is compared on the parameters alone


def user_update(trainer: Trainer, batches: list[list[Batch]], rank: int, device: str) -> UserUpdate:
    """A fresh model and the file's optimizer, stepped by the file's train_step on this rank's K
    microbatches. The step() calls are counted and all-reduced (MAX): the optimizer state is
    compared only when some rank's optimizer stepped and every rank's stepped the model's own
    parameters (not a wrapper's flat copies, whose state no parameter name keys), so every rank
    compares the same tensors (an optimizer that is no torch.optim.Optimizer cannot be
    counted: compared)."""
    import torch.distributed as dist

    model = trainer.build(device)
    optimizer = trainer.make_optimizer(model)
    watch = states.StepWatch(optimizer, model)
    trainer.call("train_step", model, optimizer, trainer.step_input(batches, rank, model))
    stepped = -1.0 if watch.steps is None else float(watch.steps)
    most = torch.tensor([stepped, float(not watch.state_read)], device=device_of(device))
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    steps = None if most[0].item() < 0 else int(most[0].item())
    state_read = most[1].item() == 0
    named = trainer.parameters(model, stepped_by_user=True)
    state = snapshot(model, optimizer, named, with_optimizer=steps != 0 and state_read)
    return UserUpdate(parameters=named, state=state, steps=steps, state_read=state_read)


def compare_updates(
    trainer: Trainer,
    user: UserUpdate,
    reference: Reference,
    tolerance: float,
    device: str,
) -> dict[str, Any]:
    """The user's update against the reference: the largest gap and the first tensor beyond
    `tolerance`; whether either moved the parameters at all; how far the ranks' updates are
    apart (an all-reduce: rank_spread); optimizer state only the user's step made; and the
    first parameter no longer in DTYPE."""
    # no optimizer stepped, or a wrapper's on flat copies: compare the parameters alone
    want = readable(reference.final, user.steps != 0 and user.state_read)
    max_abs_diff, first = compare(user.state, want, tolerance)
    user_parameters = {k: t for k, t in user.state.items() if k.startswith("parameter ")}
    return {
        "max_abs_diff": max_abs_diff,
        "first_divergence": first,
        "unchanged": same_state(
            user_parameters, {k: reference.initial.get(k) for k in user_parameters}
        ),
        "reference_changed": not same_state(want, reference.initial),
        "spread": rank_spread(user.state, device_of(device)),
        "tolerance": tolerance,
        "floor": reference.floor,
        "stepped": user.steps,
        "state_read": user.state_read,
        "extra_state": extra_state(user.state, want),
        "dtype_after": first_not_in(user.parameters, trainer.dtype),
        "non_finite": first_non_finite(user.state),
    }


def sgd_delta(trainer: Trainer, batches: list[list[Batch]], rank: int, device: str) -> torch.Tensor:
    """The file's train_step once more on a fresh model, with SGD at learning rate 1 in place
    of the file's optimizer: the parameters' change (flat, float64, named_parameters order)
    is then minus the gradient the step applied, which rank 0's mode.solve reads. Every rank
    runs it: the user's train_step may hold collectives (DDP's all-reduce)."""
    model = trainer.build(device)
    order = [n for n, _ in model.named_parameters()]
    before = states.flat_parameters(trainer.parameters(model, False), order)
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer.call("train_step", model, sgd, trainer.step_input(batches, rank, model))
    after = states.flat_parameters(trainer.parameters(model, True), order)
    return after - before


@dataclass(frozen=True)
class Scenario:
    """One scenario as a rank runs it: its name, its grid and what --counts gave."""

    name: str
    grid: Any  # the mode's SHAPE: P x K (token, coupled), or [rank][epoch][microbatch] (run)
    counts: Grid | None  # --counts / --counts-labels (None: the mode's own scenarios)
    given: str  # what --counts counts: "terms" or "labels"
    accum: int  # K, the microbatches a rank accumulates per update


def check_scenario(
    trainer: Trainer,
    mode: RankMode | RunMode,
    scenario: Scenario,
    at: tuple[float, int, str],
) -> dict[str, Any]:
    """This rank's evidence on one scenario (report.py judges the ranks' evidence together):
    the scenario's name and shape, the comparison with the reference, and on rank 0 the
    mode's solve. `at`: --tolerance, this rank, --device."""
    if hasattr(mode, "check_scenario"):  # a whole run, not one update: the mode's own steps
        return cast("RunMode", mode).check_scenario(trainer, scenario, at)
    tolerance, rank, device = at
    batches = mode.batches(trainer, scenario.name, scenario.grid, scenario.counts, scenario.given)
    loss, reordered = mode.reference_loss(trainer, batches), None
    if mode.reorders(trainer.dtype):  # the grid reversed: the reference's own floor
        reordered = mode.reference_loss(trainer, [row[::-1] for row in batches[::-1]])
    reference = reference_update(trainer, loss, reordered, device)
    tolerance = scenario_tolerance(tolerance, reference.floor)
    user = user_update(trainer, batches, rank, device)
    named = {"name": scenario.name, mode.SHAPE: [list(row) for row in scenario.grid]}
    evidence = {**named, **compare_updates(trainer, user, reference, tolerance, device)}
    delta = sgd_delta(trainer, batches, rank, device)
    if rank == 0:  # one rank solves; every rank took part in the collectives above
        evidence |= mode.solve(trainer, batches, delta, trainer.build(device))
    return evidence
