"""The full-Transformer experiment: is one update still the same update, split in time or space?

Every branch starts from the committed step-800 weights of the lab's 298,176-parameter
Transformer (runners/lm) and makes ONE update on the same four 96-token windows, of which
the user labels the final n_w positions (N = sum n_w; padding never counts). See
runners/lm/branches.py for the branches: the full-batch reference, accumulation normalised
by the global N, microbatch means weighted equally, DDP's mean of local means, and the
P / N coefficient (core.ledger.local_loss_scale). Each runs with SGD (fresh state) and AdamW
(the restored step-800 state) and is compared with its own optimizer's reference at 2e-10.

One torchrun launch runs, on every rank, all branches for the chosen labels, the same for
the equal-count control (the wrong rules pass when every microbatch and rank holds the
same count), and the N = 0 case: a coordinated skip against a naive zero-loss step.

    python -m runners.transformer --json [--labels 40,7,0,23] [--world-size 2] [--optimizer both]
    torchrun --standalone --nproc-per-node 2 -m runners.transformer --out-dir /tmp/tf

Exit codes: 0 ok, 1 failed run (one line on stderr), 2 bad arguments (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from functools import partial

from core import ledger
from core import validation as v
from runners.cli import experiment_parser, launch_with_report, run_for_cli
from runners.launcher import RunResult, init_worker, write_rank_output
from runners.lm import data

WORKER = "runners.transformer"
TOLERANCE, BRANCHES, MICROBATCHES = data.TOLERANCE, data.BRANCHES, data.MICROBATCHES
OPTIMIZER_CHOICES = {"sgd": ("sgd",), "adamw": ("adamw",), "both": ("sgd", "adamw")}
WORLD_SIZES = (1, 2, 4)  # each rank holds 4 / P whole windows
ZERO_LABELS = (0, 0, 0, 0)


def control_labels(world_size: int) -> tuple[int, ...]:
    """Equal counts per microbatch (40 and 40) AND per rank, though the windows differ."""
    return (24, 24, 24, 24) if world_size == 4 else (30, 10, 25, 15)


def rank_windows(world_size: int) -> list[list[int]]:
    per_rank = 4 // world_size
    return [list(range(r * per_rank, (r + 1) * per_rank)) for r in range(world_size)]


def label_counts(labels, world_size: int = 2) -> dict:
    """N, the two microbatches' counts and each rank's count for per-window `labels`."""
    return {
        "num_valid_labels": sum(labels),
        "microbatches": [sum(labels[w] for w in group) for group in MICROBATCHES],
        "ranks": [sum(labels[w] for w in rows) for rows in rank_windows(world_size)],
    }


def expected_correct(branch: str, labels, world_size: int) -> bool | None:
    """What the theory (core.ledger) predicts: True when the branch's weight per label
    equals 1 / N for every label, False when it differs, None when its mean is undefined."""
    if branch in ("full_batch", "accum_global_n", "ddp_pn_scale"):
        return True  # global-N rules: the same objective (and the same skip when N = 0)
    if branch == "accum_microbatch_mean":
        grid = [[sum(labels[w] for w in mb) for mb in MICROBATCHES]]
        scheme = "microbatch_mean"
    else:
        grid = [[sum(labels[w] for w in rows)] for rows in rank_windows(world_size)]
        scheme = "replica_mean"
    shares = ledger.update_shares(grid, scheme)
    correct = ledger.update_shares(grid, ledger.CORRECT_SCHEME)
    cells = [
        (s, c)
        for s_row, c_row in zip(shares, correct, strict=True)
        for s, c in zip(s_row, c_row, strict=True)
    ]
    if any(s is None for s, _ in cells):
        return None
    return all(math.isclose(s, c, rel_tol=1e-12) for s, c in cells)


def predictions(labels, world_size: int = 2, optimizer: str = "both") -> list[dict]:
    """Every branch's `expected_correct` for these labels, before anything runs."""
    return [
        {"name": b, "optimizer": o, "expected_correct": expected_correct(b, labels, world_size)}
        for o in OPTIMIZER_CHOICES[optimizer]
        for b in BRANCHES
    ]


def check_params(labels, world_size: int = 2, optimizer: str = "both") -> dict:
    """Validated launch parameters; labels are checked against each window's capacity."""
    world_size = v.count(world_size, "world_size", minimum=1)
    if world_size not in WORLD_SIZES:
        raise v.InvalidInput("world_size", world_size, "one_of", ", ".join(map(str, WORLD_SIZES)))
    optimizer = v.choice(optimizer, "optimizer", tuple(OPTIMIZER_CHOICES))
    capacity = data.capacities(data.experiment_windows())
    if isinstance(labels, str):
        counts = data.parse_labels(labels, capacity)
    else:
        counts = data.validate_labels(labels, capacity)
    return {"labels": counts, "world_size": world_size, "optimizer": optimizer}


DIFF_FLOOR = 1e-20  # where an exact 0 is drawn on a log axis (which has no 0)


def chart_rows(branches: list[dict], floor: float = DIFF_FLOOR) -> list[dict]:
    """One row per (branch, optimizer, parameter tensor) with |delta| after the update, for a
    log-scale chart: an exact 0 is plotted at `floor` and flagged `exact_zero`."""
    return [
        {
            "branch": row["name"],
            "optimizer": row["optimizer"],
            "tensor": tensor,
            "abs_diff": diff,
            "plotted": max(diff, floor),
            "exact_zero": diff == 0.0,
        }
        for row in branches
        for tensor, diff in row["param_diffs"].items()
    ]


# ---------------------------------------------------------------- worker (one per rank)


def _run_config(start, windows, labels, optimizers, rank: int, world: int) -> list[dict]:
    from runners.lm import branches as b

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
    from runners.lm import branches as b

    inputs, targets = b.batch(windows, ZERO_LABELS)
    out = {}
    for optimizer_name in b.OPTIMIZERS:
        model, optimizer = start.fresh(optimizer_name)
        before = b.capture_state(model, optimizer, b.Trace("initial"))
        skipped = b.distributed("ddp_pn_scale", model, optimizer, inputs, targets, ZERO_LABELS, rank, world)
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


def worker_main(argv: list[str] | None = None) -> None:
    """torchrun entry point: every branch on this rank, rank<RANK>.json in --out-dir."""
    # The experiment is CPU float64 over Gloo by design (the seed's claim); hiding CUDA before
    # torch loads keeps init_worker from choosing NCCL on a machine that has a GPU.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    @record  # a raising rank leaves torchrun an error file: the launcher's root cause
    def main() -> None:
        parser = argparse.ArgumentParser(prog=WORKER)
        parser.add_argument("--out-dir", required=True)
        parser.add_argument("--labels", default=",".join(map(str, data.DEFAULT_LABELS)))
        parser.add_argument("--optimizer", default="both", choices=tuple(OPTIMIZER_CHOICES))
        args = parser.parse_args(argv)
        rank, world = init_worker()
        torch.use_deterministic_algorithms(True)
        params = check_params(args.labels, world, args.optimizer)
        from runners.lm.branches import Start

        windows = data.experiment_windows()
        start = Start.from_artifacts()
        optimizers = OPTIMIZER_CHOICES[params["optimizer"]]
        control = control_labels(world)
        payload = {
            "rank": rank,
            "world_size": world,
            "backend": dist.get_backend(),
            "labels": list(params["labels"]),
            "optimizers": list(optimizers),
            "main": _run_config(start, windows, params["labels"], optimizers, rank, world),
            "control_labels": list(control),
            "control": _run_config(start, windows, control, optimizers, rank, world),
            "zero_labels": _zero_labels(start, windows, rank, world),
        }
        write_rank_output(args.out_dir, rank, payload)
        dist.destroy_process_group()

    main()


# ---------------------------------------------------------------- launcher side


def _merge(ranks: tuple[dict, ...], key: str, labels, world_size: int) -> list[dict]:
    """One row per (optimizer, branch): the worst rank's |delta|, every rank's hash."""
    rows = []
    for i, first in enumerate(ranks[0][key]):
        per = [r[key][i] for r in ranks]
        if any((p["name"], p["optimizer"]) != (first["name"], first["optimizer"]) for p in per):
            raise ValueError("ranks ran different branches")
        diffs = [p["max_abs_diff"] for p in per]
        divergence = next(
            ({**p["first_divergence"], "rank": r} for r, p in enumerate(per) if p["first_divergence"]), None
        )
        rows.append(
            {
                "name": first["name"],
                "optimizer": first["optimizer"],
                "expected_correct": expected_correct(first["name"], labels, world_size),
                "status": first["status"],
                "reason": first["reason"],
                "loss": first["loss"],
                "max_abs_diff": None if None in diffs else max(diffs),
                "max_abs_diff_state": None
                if any(p["max_abs_diff_state"] is None for p in per)
                else max(p["max_abs_diff_state"] for p in per),
                "passed": all(p["passed"] for p in per),
                "first_divergence": divergence,
                "divergence_by_stage": per[0]["divergence_by_stage"],
                "rank_hashes": [p["hash"] for p in per],
                "param_diffs": {n: max(p["param_diffs"][n] for p in per) for n in first["param_diffs"]},
            }
        )
    return rows


def build_report(ranks: tuple[dict, ...]) -> dict:
    """The CLI's JSON from every rank's output (ValueError if the ranks disagree on inputs)."""
    first = ranks[0]
    for key in ("labels", "optimizers", "world_size", "control_labels"):
        if any(r[key] != first[key] for r in ranks):
            raise ValueError(f"ranks disagree on {key}")
    labels, world_size = tuple(first["labels"]), first["world_size"]
    zero = {name: [r["zero_labels"][name] for r in ranks] for name in first["zero_labels"]}
    naive_changed = []
    for name, per in zero.items():
        for kind in per[0]["naive_changed"]:
            naive_changed.append(f"{name}.{kind}")
    windows = data.experiment_windows()
    return {
        "tolerance": TOLERANCE,
        "labels": list(labels),
        "num_valid_labels": sum(labels),
        "world_size": world_size,
        "backend": first["backend"],
        "windows": [
            {
                "document": w.document,
                "index": w.index,
                "capacity": w.capacity,
                "padding": w.padding,
                "rank": r,
            }
            for r, rows in enumerate(rank_windows(world_size))
            for w in (windows[i] for i in rows)
        ],
        "branches": _merge(ranks, "main", labels, world_size),
        "equal_count_control": {
            "labels": first["control_labels"],
            "branches": _merge(ranks, "control", tuple(first["control_labels"]), world_size),
        },
        "zero_labels": {
            "skip_state_identical": all(
                p["skip_status"] == "skipped"
                and not p["skip_changed"]
                and p["skip_hash"] == p["initial_hash"]
                for per in zero.values()
                for p in per
            ),
            "naive_changed": naive_changed,
            "by_optimizer": {
                name: {
                    "naive_changed": per[0]["naive_changed"],
                    "naive_max_weight_change": max(p["naive_max_weight_change"] for p in per),
                    "steps_before": per[0]["steps_before"],
                    "steps_after_naive": per[0]["steps_after_naive"],
                    "ranks_agree": len({(tuple(p["naive_changed"]), p["skip_hash"]) for p in per}) == 1,
                }
                for name, per in zero.items()
            },
        },
        # each rank's signed JSON payload; no timings inside, so equal inputs sign equally
        "rank_output_sha256": [r["sha256"] for r in ranks],
    }


def run(
    labels=data.DEFAULT_LABELS,
    world_size: int = 2,
    optimizer: str = "both",
    *,
    timeout_s: float = 240.0,
    pg_timeout_s: float = 60.0,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Launch the experiment; `.report` is the CLI's JSON dict.

    Invalid parameters raise ValueError / TypeError before anything starts; a failed or
    timed-out run returns ok=False with a one-line message (never raises).
    """
    params = check_params(labels, world_size, optimizer)
    worker_args = ["--labels", ",".join(map(str, params["labels"])), "--optimizer", params["optimizer"]]
    return launch_with_report(
        WORKER,
        params["world_size"],
        worker_args,
        build_report,
        timeout_s=timeout_s,
        pg_timeout_s=pg_timeout_s,
        progress=progress,
    )


def _print_table(report: dict) -> None:
    print(f"labels {report['labels']}  N={report['num_valid_labels']}  P={report['world_size']}")
    for row in report["branches"]:
        diff = "undefined" if row["max_abs_diff"] is None else f"{row['max_abs_diff']:.3e}"
        where = row["first_divergence"] or {}
        first = f"{where.get('stage', '')} {where.get('tensor') or ''}".strip()
        verdict = "pass" if row["passed"] else "FAIL"
        print(f"{row['name']:<22} {row['optimizer']:<6} {diff:>10}  {verdict:<4}  {first}")
    zero = report["zero_labels"]
    print(f"N = 0: skip identical {zero['skip_state_identical']}; naive step changed {zero['naive_changed']}")


def cli(argv: list[str] | None = None) -> int:
    """`python -m runners.transformer`: 0 ok, 1 failed run, 2 bad arguments."""
    from runners.lm.artifacts import ArtifactError

    parser = experiment_parser("runners.transformer", __doc__, timeout_s=240.0)
    parser.add_argument("--labels", default=",".join(map(str, data.DEFAULT_LABELS)), help="per-window counts")
    parser.add_argument("--world-size", type=int, default=2, help=f"processes P, one of {WORLD_SIZES}")
    parser.add_argument("--optimizer", default="both", help="sgd, adamw or both")
    args = parser.parse_args(argv)
    try:
        params = check_params(args.labels, args.world_size, args.optimizer)
        v.positive(args.timeout, "timeout")
    except ArtifactError as exc:
        print(f"{parser.prog}: broken artifacts: {exc}", file=sys.stderr)
        return 1
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    result = run_for_cli(parser, partial(run, **params, timeout_s=args.timeout))
    if result is None:
        return 1
    if args.json:
        print(json.dumps(result.report, indent=1))
    else:
        _print_table(result.report)
    print(f"launch took {result.seconds:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        worker_main()
    else:
        sys.exit(cli())
