"""One rank of the Transformer experiment: every branch for the chosen labels, the equal-count
control and N = 0, each from the committed step-800 weights.

    torchrun --standalone --nproc-per-node 2 -m pclab.experiments.transformer --out-dir /tmp/tf
"""

from __future__ import annotations

import os
from pathlib import Path

from pclab.experiments.base import rank_main
from pclab.experiments.transformer.lm import data
from pclab.experiments.transformer.params import (
    BRANCHES,
    OPTIMIZER_CHOICES,
    TOLERANCE,
    ZERO_LABELS,
    Params,
    control_labels,
)


def _single_process_gradients(start, windows, configs, rank: int, world: int) -> dict:
    """The gradient of every single-process branch of every label set in `configs`, each
    computed by one rank (taking turns) and sent to the others: the ranks compute their
    shares at the same time, and every rank then holds every gradient, bit for bit."""
    from pclab.experiments.transformer.lm import branches as b

    items = [(c, name) for c in configs for name in BRANCHES if name not in b.DISTRIBUTED]
    owners = {item: i % world for i, item in enumerate(items)}
    mine = {}
    for config, name in items:
        if owners[config, name] == rank:
            inputs, targets = b.batch(windows, configs[config])
            model = start.model()
            mine[config, name] = b.single_process_gradient(
                name, model, inputs, targets, configs[config]
            )
    shapes = {n: w.shape for n, w in start.weights.items()}
    out = {}
    for config, name in items:  # the same order on every rank: one broadcast each
        outcome = b.single_process_outcome(name, configs[config])
        if outcome is not None:  # nothing computed: every rank knows it from the counts
            out[config, name] = outcome
        else:
            src = owners[config, name]
            out[config, name] = b.share_gradient(mine.get((config, name)), shapes, src)
            if src == rank:
                out[config, name] = mine[config, name]  # the owner keeps its own tensors
    return out


def _run_config(start, windows, labels, optimizers, rank, world, single) -> list[dict]:
    """Every branch for these labels with each optimizer, compared with that optimizer's
    full-batch reference: each branch's gradient once (`single`: the single-process ones,
    by name), then one update per optimizer."""
    from pclab.experiments.transformer.lm import branches as b

    inputs, targets = b.batch(windows, labels)
    rows, references = {}, {}
    for name in BRANCHES:  # full_batch first: every optimizer's reference
        if name in b.DISTRIBUTED:
            model = start.model()
            gradient = b.distributed_gradient(name, model, inputs, targets, labels, rank, world)
        else:
            gradient = single[name]
        for optimizer_name in optimizers:
            trace = b.update(gradient, *start.fresh(optimizer_name))
            if name == "full_batch":
                references[optimizer_name] = trace
            rows[optimizer_name, name] = {
                "name": name,
                "optimizer": optimizer_name,
                "status": trace.status,
                "reason": trace.reason,
                "loss": trace.loss,
                **b.compare(trace, references[optimizer_name], TOLERANCE),
                "hash": b.state_hash(trace),
            }
    return [rows[o, name] for o in optimizers for name in BRANCHES]


def _zero_labels(start, windows, rank: int, world: int) -> dict:
    """N = 0 with each optimizer: the coordinated skip vs back-propagating 0 and stepping."""
    from pclab.experiments.transformer.lm import branches as b

    inputs, targets = b.batch(windows, ZERO_LABELS)
    skip = b.distributed_gradient(
        "ddp_pn_scale", start.model(), inputs, targets, ZERO_LABELS, rank, world
    )
    naive_gradient = b.naive_zero_gradient(start.model(), inputs, targets, ZERO_LABELS, rank, world)
    out = {}
    for optimizer_name in b.OPTIMIZERS:
        model, optimizer = start.fresh(optimizer_name)
        before = b.capture_state(model, optimizer, b.Trace("initial"))
        skipped = b.update(skip, model, optimizer)
        naive = b.update(naive_gradient, *start.fresh(optimizer_name))
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


def compute(params: Params, rank: int, world: int) -> dict:
    """Every branch on this rank, for the chosen labels, the control and N = 0."""
    import torch

    from pclab.experiments.transformer.lm.branches import shared_start

    torch.use_deterministic_algorithms(True)
    windows = data.experiment_windows()
    start = shared_start()
    optimizers = OPTIMIZER_CHOICES[params.optimizer]
    configs = {"main": params.labels, "control": control_labels(world)}
    single = _single_process_gradients(start, windows, configs, rank, world)
    runs = {
        config: _run_config(
            start,
            windows,
            labels,
            optimizers,
            rank,
            world,
            {name: gradient for (c, name), gradient in single.items() if c == config},
        )
        for config, labels in configs.items()
    }
    return {
        "labels": list(params.labels),
        "optimizers": list(optimizers),
        "main": runs["main"],
        "control_labels": list(configs["control"]),
        "control": runs["control"],
        "zero_labels": _zero_labels(start, windows, rank, world),
    }


def preload() -> tuple[Path, ...]:
    """What every rank loads first - the four windows (a tokenised corpus) and the step-800
    start, each hash-checked - loaded once in the warm pool's zygote (runners.zygote), which
    every rank is forked from: 56 ms less a rank (BENCHMARKS.md, issue 35). Returns the files
    they came from: the zygote watches them as it watches the project's modules."""
    from pclab.experiments.transformer.lm import artifacts
    from pclab.experiments.transformer.lm.branches import shared_start

    data.experiment_windows()
    shared_start()
    names = (artifacts.MANIFEST, artifacts.TOKENIZER, artifacts.WEIGHTS, artifacts.ADAMW_STATE)
    return (*data.corpus_paths(), *(artifacts.ROOT / name for name in names))


def main(argv: list[str] | None = None) -> None:
    """torchrun entry point: rank<RANK>.json in --out-dir (experiments.base.rank_main)."""
    # The experiment is CPU float64 over Gloo by design (the seed's claim); hiding CUDA before
    # torch loads keeps init_worker from choosing NCCL on a machine that has a GPU.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    rank_main(Params, compute, argv)
