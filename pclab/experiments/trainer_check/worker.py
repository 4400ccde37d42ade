"""One rank of the trainer check: every scenario, the user's step against the reference.

Per trainer file and scenario (check_scenario), every rank
    1. builds the same microbatches for all P x K cells and steps a fresh model on the
       global token mean (sum of every microbatch's terms / N) in this process alone
       (probe.scenario_batches, probe.reference_update);
    2. steps another fresh model with the user's train_step on its own K microbatches, with
       the user's optimizer (user_update), and compares every parameter and optimizer-state
       tensor (compare_updates);
    3. measures how far the ranks are apart (rank_spread: all_reduce MAX and MIN);
    4. runs train_step again with SGD at learning rate 1 (sgd_delta), and rank 0 solves the
       change for the weight each microbatch got (core.update_weights).
Before the scenarios, `preflight` checks what only the file's own code can show (a
deterministic build_model in DTYPE, one term per counted label). Each scenario runs alone
(guard.alone): the trainer raising, a rank past the scenario's deadline or collectives that
do not pair up make that scenario `different` with its diagnosis, the ranks rejoin a fresh
process group, and the next scenario runs.

Gloo on the CPU unless --device cuda (then NCCL, each rank on its local GPU). It runs
unchanged under a hand-typed torchrun (any P, more nodes) and then also writes
<out-dir>/report.json, the same JSON `pclab check --json` prints, prints the same summary,
and exits as the command does (0 same update, 1 different, 2 unusable or no evidence):

    torchrun --standalone --nproc-per-node 4 -m pclab.experiments.trainer_check \\
        --out-dir /tmp/check --accum 2 --trainer my_trainer.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pclab.core import update_weights
from pclab.experiments.trainer_check import coupled_worker, diagnoses, guard, probe, trainer_file
from pclab.experiments.trainer_check.diagnoses import Diagnosis
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.probe import Batch, State
from pclab.experiments.trainer_check.report import RankScenario, build_report, exit_code
from pclab.experiments.trainer_check.scenarios import Grid, scenario_counts
from pclab.experiments.trainer_check.summary import render
from pclab.experiments.trainer_check.trainer_file import Trainer
from pclab.runners.processes import TOKEN_ENV
from pclab.runners.worker import finish_worker, init_worker, write_rank_output

if TYPE_CHECKING:  # annotations only; the functions import torch where they use it
    import torch


NAN_CODE, INF_CODE = 7.0e300, 8.0e300  # NaN and inf in rank_spread: equal where ranks agree
# bit for bit on where they are; a finite number across from them spreads past 1e300


def rank_spread(state: State, device: torch.device) -> float | None:
    """max over elements of (max - min across ranks) of the same state; None when the ranks
    hold differently shaped state, or a NaN or inf where another rank holds something else
    (ranks that hold the same NaNs agree: that is non_finite, not disagreement)."""
    import torch
    import torch.distributed as dist

    vector = [t.flatten() for t in state.values()]
    flat = torch.cat(vector).to(device) if vector else torch.zeros(0, device=device)
    flat = flat.nan_to_num(nan=NAN_CODE, posinf=INF_CODE, neginf=-INF_CODE)
    sizes = torch.tensor([flat.numel(), -flat.numel()], dtype=torch.float64, device=device)
    dist.all_reduce(sizes, op=dist.ReduceOp.MAX)
    if sizes[0] != -sizes[1]:
        return None
    high, low = flat.clone(), flat.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    if not flat.numel():
        return 0.0
    spread = float((high - low).abs().max())
    return spread if spread < 1e300 else None


def first_non_finite(state: State) -> dict[str, Any] | None:
    """The first tensor (parameters, then optimizer state) holding a NaN or inf: its name,
    how many such values, and how many tensors hold any."""
    bad = [(k, t) for k, t in state.items() if not bool(t.isfinite().all())]
    if not bad:
        return None
    name, tensor = bad[0]
    return {
        "tensor": name,
        "values": int((~tensor.isfinite()).sum()),
        "nan": bool(tensor.isnan().any()),
        "tensors": len(bad),
    }


FLOOR_FACTOR = 10  # tolerance >= this x the reference's own floor (probe.floor)


def preflight(trainer: Trainer, device: str, rank: int) -> list[Diagnosis]:
    """The contract checks that run the file's own code, before any scenario, on every rank:
    build_model twice (and on every rank) the same, in DTYPE, and token_losses one term per
    counted label. Every rank returns the same verdict (a MAX all-reduce of "found one")."""
    import torch
    import torch.distributed as dist

    found: list[Diagnosis] = []
    first, second = probe.build(trainer, device), probe.build(trainer, device)
    a, b = first.state_dict(), second.state_dict()
    for name, tensor in a.items():
        other = b.get(name)
        if other is None or other.shape != tensor.shape or not torch.equal(other, tensor):
            same_shape = other is not None and other.shape == tensor.shape
            gap = float((other.double() - tensor.double()).abs().max()) if same_shape else None
            found.append(diagnoses.model_not_deterministic(name, gap, across_ranks=False))
            break
    floating = {n: t.detach().double() for n, t in a.items() if t.is_floating_point()}
    if rank_spread(floating, probe.device_of(device)) != 0.0 and not found:  # every rank joins
        name = next(iter(floating), "the parameters")
        found.append(diagnoses.model_not_deterministic(name, None, across_ranks=True))
    wrong = probe.first_not_in(dict(first.named_parameters()), trainer.dtype)
    if wrong and not found:
        found.append(diagnoses.dtype_built(wrong[0], wrong[1], trainer.dtype))
    if not found:
        found.extend(_terms_mismatch(trainer, first))
    flag = torch.tensor([float(bool(found))], device=probe.device_of(device))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() and not found:  # another rank found one: this rank stops with it
        found.append(diagnoses.elsewhere())
    return found


def _terms_mismatch(trainer: Trainer, model: torch.nn.Module) -> list[Diagnosis]:
    """token_losses against the counted labels of a few microbatches (0, a few, full). The
    default microbatch may lose exactly its position-0 labels (a causal LM's shift)."""
    own = trainer.has("make_microbatch")
    sizes = sorted({0, 1, max(1, trainer.capacity // 3), trainer.capacity}, reverse=True)
    for step, valid in enumerate(sizes):
        batch = probe.microbatch(trainer, "preflight", 0, step, valid)
        got = len(probe.terms(trainer, model, batch))
        shifted = not own and got == valid - probe.labels_at_first_position(batch)
        if got != valid and not shifted:
            return [diagnoses.terms_mismatch(got, valid, own)]
    return []


def check_scenario(
    trainer: Trainer,
    name: str,
    counts: Sequence[Sequence[int]],
    tolerance: float,
    rank: int,
    device: str,
    off_first: bool = False,
) -> RankScenario:
    """This rank's evidence on one scenario (report.py judges the ranks' evidence together):
    its counts' microbatches, the reference update, the user's update and how the two compare,
    and on rank 0 each microbatch's weight. Every rank runs every scenario in the same order:
    the steps hold collectives (the user's own, and the check's all-reduces) that pair up."""
    batches = probe.scenario_batches(trainer, name, counts, off_first)
    probe.GLOBAL[0] = batches  # GLOBAL_BATCH: what train_step is handed (step_batches)
    reference = probe.reference_update(trainer, batches, device)
    named = {"name": name, "label_positions": [list(row) for row in counts]}
    at = (tolerance, rank, device)
    return probe.judge_scenario(trainer, batches, reference, named, at, STEPS, _weights)


def scenario_tolerance(tolerance: float, floor: float | None) -> float:
    """--tolerance, raised to FLOOR_FACTOR x the reference's own floor: a step cannot be asked
    to match the reference closer than the reference matches itself (float32, bfloat16)."""
    return tolerance if floor is None else max(tolerance, FLOOR_FACTOR * floor)


@dataclass(frozen=True)
class UserUpdate:
    """What the file's own train_step did to a fresh model on this rank."""

    parameters: State  # by name, as the step left them (full_parameters when the file has it)
    state: State  # parameters as float64, and optimizer state when any rank's optimizer stepped
    steps: int | None  # optimizer.step() calls, most on any rank (None: none could be counted)


def step_batches(trainer: Trainer, own_batches: list[Batch], model: torch.nn.Module) -> Any:
    """What train_step is handed, on the model's device: this rank's K microbatches, or with
    GLOBAL_BATCH = True every rank's (P lists of K, by rank: the framework's own sampler
    hands out this rank's). The file's fresh_start() first, when it has one: each call is a
    new update from a fresh model."""
    if trainer.has("fresh_start"):
        trainer.call("fresh_start")
    if trainer.global_batch:
        every = probe.GLOBAL[0]
        return [[probe.on_device(b, model) for b in row] for row in every]
    return [probe.on_device(b, model) for b in own_batches]


def user_update(trainer: Trainer, own_batches: list[Batch], device: str) -> UserUpdate:
    """A fresh model and the file's optimizer, stepped by the file's train_step on this rank's K
    microbatches. The step() calls are counted and all-reduced (MAX): the optimizer state is
    compared only when some rank's optimizer stepped, so every rank compares the same tensors
    (an optimizer that is no torch.optim.Optimizer cannot be counted: compared)."""
    import torch
    import torch.distributed as dist

    model = probe.build(trainer, device)
    optimizer = probe.make_optimizer(trainer, model)
    counter = probe.count_steps(optimizer)
    trainer.call("train_step", model, optimizer, step_batches(trainer, own_batches, model))
    stepped = -1.0 if counter is None else float(counter[0])
    most = torch.tensor([stepped], device=probe.device_of(device))
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    steps = None if most.item() < 0 else int(most.item())
    parameters = probe.parameters(trainer, model, stepped_by_user=True)
    state = probe.snapshot(model, optimizer, parameters, with_optimizer=steps != 0)
    return UserUpdate(parameters=parameters, state=state, steps=steps)


def compare_updates(
    trainer: Trainer,
    user: UserUpdate,
    reference: probe.Reference,
    tolerance: float,
    device: str,
) -> dict[str, Any]:
    """The user's update against the reference: the largest gap and the first tensor beyond
    `tolerance`; whether either moved the parameters at all; how far the ranks' updates are
    apart (an all-reduce: rank_spread); optimizer state only the user's step made; and the
    first parameter no longer in DTYPE."""
    want = reference.final
    if user.steps == 0:  # no optimizer stepped: compare the parameters alone
        want = {k: t for k, t in want.items() if k.startswith("parameter ")}
    max_abs_diff, first = probe.compare(user.state, want, tolerance)
    user_parameters = {k: t for k, t in user.state.items() if k.startswith("parameter ")}
    return {
        "max_abs_diff": max_abs_diff,
        "first_divergence": first,
        "unchanged": probe.same_state(
            user_parameters, {k: reference.initial.get(k) for k in user_parameters}
        ),
        "reference_changed": not probe.same_state(want, reference.initial),
        "spread": rank_spread(user.state, probe.device_of(device)),
        "tolerance": tolerance,
        "floor": reference.floor,
        "stepped": user.steps,
        "extra_state": probe.extra_state(user.state, want),
        "dtype_after": probe.first_not_in(user.parameters, trainer.dtype),
        "non_finite": first_non_finite(user.state),
    }


def sgd_delta(trainer: Trainer, own_batches: list[Batch], device: str) -> torch.Tensor:
    """The file's train_step once more on a fresh model, with SGD at learning rate 1 in place
    of the file's optimizer: the parameters' change (flat, float64) is then minus the
    gradient the step applied, from which rank 0 solves each microbatch's weight (_weights).
    Every rank runs it: the user's train_step may hold collectives (DDP's all-reduce)."""
    import torch

    model = probe.build(trainer, device)
    order = [n for n, _ in model.named_parameters()]
    before = probe.flat_parameters(probe.parameters(trainer, model, False), order)
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer.call("train_step", model, sgd, step_batches(trainer, own_batches, model))
    after = probe.flat_parameters(probe.parameters(trainer, model, True), order)
    return after - before


def _weights(
    trainer: Trainer, batches: list[list[Batch]], delta: torch.Tensor, device: str
) -> dict[str, Any]:
    """The term counts and, solved from `delta`, each microbatch's weight x N (over the
    reference's clip coefficient when the file sets MAX_GRAD_NORM)."""
    at_start = probe.build(trainer, device)
    grads: list[list[list[float]]] = []
    term_counts: list[list[int]] = []
    for row in batches:
        grads.append([probe.flat_gradient(trainer, at_start, b) for b in row])
        term_counts.append([len(probe.terms(trainer, at_start, b)) for b in row])
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


STEPS = probe.RankSteps(user_update, compare_updates, sgd_delta, rank_spread, scenario_tolerance)


def check_trainer(
    path: str,
    accum: int,
    counts: Grid | None,
    tolerance: float,
    rank: int,
    world: int,
    device: str = "cpu",
    units: tuple[int, guard.Units] = (0, guard.Units()),
    counts_given: str = "terms",
) -> dict[str, Any]:
    """This rank's evidence on one trainer file; `units`: the index of its first scenario
    among every file's, and which of them this launch runs; `counts_given`: what --counts
    counts, "terms" (labels placed off position 0 where they fit) or "labels" (anywhere)."""
    first_unit, run = units
    trainer = trainer_file.load(path)
    if trainer.mode == "coupled":  # issue 28: batch_loss, the coupled mode's own path
        return coupled_worker.check_trainer(
            trainer, accum, counts, tolerance, (rank, world, device), units, STEPS
        )
    if counts is None:
        grids, skipped = scenario_counts(world, accum, trainer.capacity)
    else:
        grids, skipped = {"custom": counts}, []
    too_many = [n for grid in grids.values() for row in grid for n in row if n > trainer.capacity]
    if too_many:
        limit = f"{trainer.capacity} = BATCH_SIZE x {trainer.labelled_columns} labelled positions"
        raise ValueError(f"counts={max(too_many)} is more than a microbatch holds ({limit})")
    header = {
        "trainer": str(Path(path)),
        "skipped": skipped,
        "first_position_labelled": trainer.first_position_labelled,
        "dtype": trainer.dtype,
        "max_grad_norm": trainer.max_grad_norm,
        "device": device,
        "counts_given": None if counts is None else counts_given,
    }
    off_first = counts is not None and counts_given == "terms"
    found, scenarios = guard.run_units(
        (run, rank, first_unit),
        (header, "label_positions"),
        grids,
        partial(preflight, trainer, device, rank),
        lambda name, grid: check_scenario(
            trainer, name, grid, tolerance, rank, device, off_first=off_first
        ),
        device,
    )
    return {**header, "scenarios": scenarios, "diagnoses": found, "units": len(grids)}


def main(argv: list[str] | None = None) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    def run() -> None:
        args, units = guard.units_of(argv)
        params, out_dir = Params.from_worker_args(args)
        rank, world = init_worker(backend="nccl" if params.device == "cuda" else "gloo")
        units.watch_stack(rank)  # a relaunch: a rank that dies says where
        given = "labels" if params.counts_labels is not None else "terms"
        counts = params.counts if params.counts is not None else params.counts_labels
        accum, tolerance = params.accum_steps, params.tolerance
        if counts is not None and len(counts) != world:
            raise ValueError(f"--counts has {len(counts)} ranks but the world size is {world}")
        checks: list[dict[str, Any]] = []
        for p in params.trainers:
            first = sum(c["units"] for c in checks)  # scenarios of the files before
            checks.append(
                check_trainer(
                    *(p, accum, counts, tolerance, rank, world, params.device),
                    units=(first, units),
                    counts_given=given,
                )
            )
        payload: dict[str, Any] = {
            "rank": rank,
            "world_size": world,
            "accum_steps": accum,
            "tolerance": tolerance,
            "backend": dist.get_backend(),
            "torch": torch.__version__,
            "checks": checks,
        }
        write_rank_output(out_dir, rank, payload)
        gathered: list[Any] | None = [None] * world if rank == 0 else None
        dist.gather_object(payload, gathered, dst=0)
        code = 0
        if gathered is not None:  # rank 0: what a hand-typed torchrun leaves, the CLI's JSON,
            report = build_report(tuple(gathered))["checks"]  # its summary and exit code
            text = json.dumps(report[0] if len(report) == 1 else report, indent=2)
            Path(out_dir, "report.json").write_text(text + "\n")
            if TOKEN_ENV not in os.environ:  # not the lab's launch: a user's torchrun
                print("\n\n".join(render(check) for check in report), flush=True)
                code = max(exit_code(check) for check in report)
        finish_worker(code)

    record(run)()  # a raising rank leaves torchrun an error file: the launcher's root cause
