"""The trainer check's scenario pipeline on a rank: the steps every mode shares, in order.

Per trainer file, every rank first runs `preflight` (build_model deterministic on two calls
and across ranks, in DTYPE; then the mode's own contract checks). Per scenario
(`check_scenario`), every rank
    1. builds every cell's microbatch, P x K, the same on every rank (mode.batches), and the
       mode's reference objective over the whole grid (mode.reference_loss), and over the
       grid reversed where the mode asks (mode.reorders: the reference's own floor);
    2. runs the trainer on three fresh models (trainer.py): the reference's update in this
       process alone (`reference_update`), the file's train_step on its own K microbatches
       (or every rank's, GLOBAL_BATCH) with the file's optimizer (`user_update`), and
       train_step again with SGD at learning rate 1 (`sgd_delta`);
    3. compares every parameter and optimizer-state tensor of the user's update with the
       reference (`compare_updates`), the ranks' spread all-reduced (`rank_spread`); rank 0
       asks the mode what the SGD change optimised from a fresh model (mode.solve: each
       microbatch's weight, or a scheme).
Every rank runs every step, in the same order: the user's collectives and the check's pair
up. A mode supplies only its reference objective, its solve and its scenario shapes
(mode_protocols.RankMode); guard.run_units runs each scenario alone (worker.check_trainer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch

import pclab.experiments.trainer_check.diagnoses as diagnoses
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.mode_protocols import Grid, RankMode, RankSide, RunMode
from pclab.experiments.trainer_check.states import (
    compare,
    extra_state,
    first_non_finite,
    first_not_in,
    floor,
    rank_spread,
    readable,
    same_state,
)
from pclab.experiments.trainer_check.trainer import (
    Reference,
    Trainer,
    UserUpdate,
    device_of,
    reference_update,
    sgd_delta,
    user_update,
)

FLOOR_FACTOR = 10  # tolerance >= this x the reference's own floor (states.floor)


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


def scenario_tolerance(tolerance: float, own_floor: float | None) -> float:
    """--tolerance, raised to FLOOR_FACTOR x the reference's own floor: a step cannot be asked
    to match the reference closer than the reference matches itself (float32, bfloat16)."""
    return tolerance if own_floor is None else max(tolerance, FLOOR_FACTOR * own_floor)


def compare_updates(
    trainer: Trainer,
    user: UserUpdate,
    reference: Reference,
    tolerance: float,
    device: str,
) -> dict[str, Any]:
    """The user's update against the reference: the largest gap and the first tensor beyond
    the tolerance (`tolerance` raised to the reference's own floor: scenario_tolerance);
    whether either moved the parameters at all; how far the ranks' updates are apart (an
    all-reduce: rank_spread); optimizer state only the user's step made; and the first
    parameter no longer in DTYPE."""
    own_floor = floor(reference.reordered, reference.final, trainer.dtype)
    tolerance = scenario_tolerance(tolerance, own_floor)
    # no optimizer stepped, or a wrapper's on flat copies: compare the parameters alone
    want = readable(reference.final, user.noted["stepped"] != 0 and user.noted["state_read"])
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
        "floor": own_floor,
        **user.noted,
        "extra_state": extra_state(user.state, want),
        "dtype_after": first_not_in(user.parameters, trainer.dtype),
        "non_finite": first_non_finite(user.state),
    }


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
    user = user_update(trainer, batches, rank, device)
    delta = sgd_delta(trainer, batches, rank, device)
    fresh = trainer.build(device) if rank == 0 else None  # where rank 0's solve starts from
    named = {"name": scenario.name, mode.SHAPE: [list(row) for row in scenario.grid]}
    evidence = {**named, **compare_updates(trainer, user, reference, tolerance, device)}
    if fresh is not None:  # one rank solves; every rank took part in the collectives above
        evidence |= mode.solve(trainer, batches, delta, fresh)
    return evidence
