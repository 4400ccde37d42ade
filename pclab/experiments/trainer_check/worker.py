"""One rank of the trainer check: every scenario, the user's step against the reference.

Per trainer file and scenario, every rank
    1. builds the same microbatches for all P x K cells and steps a fresh model on the
       global token mean (sum of every microbatch's terms / N) in this process alone;
    2. steps another fresh model with the user's train_step on its own K microbatches, with
       the user's optimizer, and compares every parameter and optimizer-state tensor;
    3. measures how far the ranks are apart (all_reduce MAX and MIN of the same tensors);
    4. runs train_step again with SGD at learning rate 1, and rank 0 solves the change for
       the weight each microbatch got (core.update_weights).

It runs unchanged under a hand-typed torchrun (any P, more nodes, NCCL with CUDA) and then
also writes <out-dir>/report.json, the same JSON `pclab check --json` prints:

    torchrun --standalone --nproc-per-node 4 -m pclab.experiments.trainer_check \\
        --out-dir /tmp/check --accum 2 --trainer my_trainer.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pclab.core import update_weights
from pclab.experiments.trainer_check import probe, trainer_file
from pclab.experiments.trainer_check.report import build_report
from pclab.experiments.trainer_check.scenarios import parse_counts, scenario_counts
from pclab.runners.worker import finish_worker, init_worker, write_rank_output


def rank_spread(state: dict, device) -> float | None:
    """max over elements of (max - min across ranks) of the same state; None when the ranks
    hold differently shaped state or a non-finite number."""
    import torch
    import torch.distributed as dist

    vector = [t.flatten() for t in state.values()]
    flat = torch.cat(vector).to(device) if vector else torch.zeros(0, device=device)
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
    return spread if spread == spread and spread != float("inf") else None


def check_scenario(trainer, name: str, counts, tolerance: float, rank: int) -> dict:
    import torch

    world, accum = len(counts), len(counts[0])
    batches = [
        [probe.microbatch(trainer, name, r, k, counts[r][k]) for k in range(accum)]
        for r in range(world)
    ]
    reference = trainer.call("build_model")
    initial = probe.snapshot(reference, torch.optim.SGD(reference.parameters(), lr=0.0))
    reference_optimizer = probe.make_optimizer(trainer, reference)
    probe.reference_step(trainer, reference, reference_optimizer, batches)
    want = probe.snapshot(reference, reference_optimizer)

    model = trainer.call("build_model")
    optimizer = probe.make_optimizer(trainer, model)
    mine = [probe.on_device(b, model) for b in batches[rank]]
    trainer.call("train_step", model, optimizer, mine)
    got = probe.snapshot(model, optimizer)
    max_abs_diff, first = probe.compare(got, want, tolerance)
    params_only = {k: t for k, t in got.items() if k.startswith("parameter ")}
    unchanged = probe.same_state(params_only, {k: initial[k] for k in params_only})
    spread = rank_spread(got, next(model.parameters()).device)

    plain = trainer.call("build_model")
    before = probe.flat_parameters(plain)
    sgd = torch.optim.SGD(plain.parameters(), lr=1.0)
    trainer.call("train_step", plain, sgd, [probe.on_device(b, plain) for b in batches[rank]])
    out = {
        "name": name,
        "label_positions": [list(row) for row in counts],
        "max_abs_diff": max_abs_diff,
        "first_divergence": first,
        "unchanged": unchanged,
        "reference_changed": not probe.same_state(want, initial),
        "spread": spread,
    }
    if rank == 0:  # one rank solves; every rank took part in the collectives above
        out |= _weights(trainer, batches, probe.flat_parameters(plain) - before)
    return out


def _weights(trainer, batches, delta) -> dict:
    """The term counts and, solved from `delta`, each microbatch's weight x N."""
    at_start = trainer.call("build_model")
    grads, term_counts = [], []
    for row in batches:
        grads.append([probe.flat_gradient(trainer, at_start, b) for b in row])
        term_counts.append([len(probe.terms(trainer, at_start, b)) for b in row])
    try:
        solved = update_weights.solve_weights(grads, delta.cpu().tolist(), term_counts)
    except ValueError:  # a non-finite update (a NaN from a mean over nothing, say)
        return {"counts": term_counts, "weights": None, "residual": None, "identifiable": None}
    weights = [list(row) for row in solved.weights_times_n]
    return {
        "counts": term_counts,
        "weights": weights,
        "residual": solved.residual,
        "identifiable": solved.identifiable,
    }


def check_trainer(path: str, accum: int, counts, tolerance: float, rank: int, world: int) -> dict:
    trainer = trainer_file.load(path)
    if counts is None:
        grids, skipped = scenario_counts(world, accum, trainer.capacity)
    else:
        grids, skipped = {"custom": counts}, []
    too_many = [n for grid in grids.values() for row in grid for n in row if n > trainer.capacity]
    if too_many:
        limit = f"{trainer.capacity} = BATCH_SIZE x {trainer.labelled_columns} labelled positions"
        raise ValueError(f"counts={max(too_many)} is more than a microbatch holds ({limit})")
    scenarios = [check_scenario(trainer, n, g, tolerance, rank) for n, g in grids.items()]
    return {
        "trainer": str(Path(path)),
        "scenarios": scenarios,
        "skipped": skipped,
        "first_position_labelled": trainer.first_position_labelled,
    }


def main(argv: list[str] | None = None) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    @record  # a raising rank leaves torchrun an error file: the launcher's root cause
    def run() -> None:
        parser = argparse.ArgumentParser(prog="pclab.experiments.trainer_check")
        parser.add_argument("--out-dir", required=True)
        parser.add_argument("--trainer", action="append", required=True)
        parser.add_argument("--accum", type=int, default=2)
        parser.add_argument("--tolerance", type=float, default=1e-10)
        parser.add_argument("--counts", default=None)
        args = parser.parse_args(argv)
        rank, world = init_worker()
        counts = None if args.counts is None else parse_counts(args.counts)
        if counts is not None and len(counts) != world:
            raise ValueError(f"--counts has {len(counts)} ranks but the world size is {world}")
        accum = args.accum if counts is None else len(counts[0])
        checks = [
            check_trainer(p, accum, counts, args.tolerance, rank, world) for p in args.trainer
        ]
        payload = {
            "rank": rank,
            "world_size": world,
            "accum_steps": accum,
            "tolerance": args.tolerance,
            "backend": dist.get_backend(),
            "torch": torch.__version__,
            "checks": checks,
        }
        write_rank_output(args.out_dir, rank, payload)
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(payload, gathered, dst=0)
        if rank == 0:  # what a hand-typed torchrun leaves: the CLI's JSON
            report = build_report(tuple(gathered))["checks"]
            text = json.dumps(report[0] if len(report) == 1 else report, indent=2)
            Path(args.out_dir, "report.json").write_text(text + "\n")
        finish_worker()

    run()
