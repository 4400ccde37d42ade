"""One rank of the Transformer experiment: every branch for the chosen labels, the equal-count
control and N = 0, each from the committed step-800 weights.

    torchrun --standalone --nproc-per-node 2 -m experiments.transformer --out-dir /tmp/tf
"""

from __future__ import annotations

import argparse
import os

from experiments.transformer.lm import data
from experiments.transformer.params import (
    BRANCHES,
    OPTIMIZER_CHOICES,
    TOLERANCE,
    ZERO_LABELS,
    Params,
    control_labels,
)
from runners.worker import finish_worker, init_worker, write_rank_output


def _run_config(start, windows, labels, optimizers, rank: int, world: int) -> list[dict]:
    from experiments.transformer.lm import branches as b

    inputs, targets = b.batch(windows, labels)
    results = []
    for optimizer_name in optimizers:
        reference = None
        for name in BRANCHES:
            model, optimizer = start.fresh(optimizer_name)
            if name in b.DISTRIBUTED:
                trace = b.distributed(name, model, optimizer, inputs, targets, labels, rank, world)
            else:
                trace = b.single_process(name, model, optimizer, inputs, targets, labels)
            reference = trace if name == "full_batch" else reference
            results.append(
                {
                    "name": name,
                    "optimizer": optimizer_name,
                    "status": trace.status,
                    "reason": trace.reason,
                    "loss": trace.loss,
                    **b.compare(trace, reference, TOLERANCE),
                    "hash": b.state_hash(trace),
                }
            )
    return results


def _zero_labels(start, windows, rank: int, world: int) -> dict:
    """N = 0 with each optimizer: the coordinated skip vs back-propagating 0 and stepping."""
    from experiments.transformer.lm import branches as b

    inputs, targets = b.batch(windows, ZERO_LABELS)
    out = {}
    for optimizer_name in b.OPTIMIZERS:
        model, optimizer = start.fresh(optimizer_name)
        before = b.capture_state(model, optimizer, b.Trace("initial"))
        skipped = b.distributed(
            "ddp_pn_scale", model, optimizer, inputs, targets, ZERO_LABELS, rank, world
        )
        model, optimizer = start.fresh(optimizer_name)
        b.naive_zero_step(model, optimizer, inputs, targets, ZERO_LABELS, rank, world)
        naive = b.capture_state(model, optimizer, b.Trace("naive"))
        out[optimizer_name] = {
            "skip_status": skipped.status,
            "skip_changed": b.changed_state(before, skipped),
            "naive_changed": b.changed_state(before, naive),
            "naive_max_weight_change": max(
                float((naive.params[n] - before.params[n]).abs().max()) for n in before.params
            ),
            "steps_before": sorted(set(before.steps.values())),
            "steps_after_naive": sorted(set(naive.steps.values())),
            "skip_hash": b.state_hash(skipped),
            "initial_hash": b.state_hash(before),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    """torchrun entry point: every branch on this rank, rank<RANK>.json in --out-dir."""
    # The experiment is CPU float64 over Gloo by design (the seed's claim); hiding CUDA before
    # torch loads keeps init_worker from choosing NCCL on a machine that has a GPU.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    @record  # a raising rank leaves torchrun an error file: the launcher's root cause
    def main() -> None:
        parser = argparse.ArgumentParser(prog="experiments.transformer")
        parser.add_argument("--out-dir", required=True)
        parser.add_argument("--labels", default=",".join(map(str, data.DEFAULT_LABELS)))
        parser.add_argument("--optimizer", default="both", choices=tuple(OPTIMIZER_CHOICES))
        args = parser.parse_args(argv)
        rank, world = init_worker()
        torch.use_deterministic_algorithms(True)
        params = Params.checked(args.labels, world, args.optimizer)
        from experiments.transformer.lm.branches import Start

        windows = data.experiment_windows()
        start = Start.from_artifacts()
        optimizers = OPTIMIZER_CHOICES[params.optimizer]
        control = control_labels(world)
        payload = {
            "rank": rank,
            "world_size": world,
            "backend": dist.get_backend(),
            "labels": list(params.labels),
            "optimizers": list(optimizers),
            "main": _run_config(start, windows, params.labels, optimizers, rank, world),
            "control_labels": list(control),
            "control": _run_config(start, windows, control, optimizers, rank, world),
            "zero_labels": _zero_labels(start, windows, rank, world),
        }
        write_rank_output(args.out_dir, rank, payload)
        finish_worker()

    main()
