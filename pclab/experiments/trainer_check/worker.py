"""One rank of the trainer check: every trainer file given, every scenario of its mode.

Per trainer file (check_trainer) the rank reads the file's mode (modes.py: token, coupled),
asks it for the scenarios' grids, and runs the shared pipeline (pipeline.py): the preflight,
then each scenario alone (guard.run_units: the trainer raising, a rank past the scenario's
deadline or collectives that do not pair up make that scenario `different` with its
diagnosis, the ranks rejoin a fresh process group, and the next scenario runs).

Gloo on the CPU unless --device cuda (then NCCL, each rank on its local GPU). It runs
unchanged under a hand-typed torchrun (any P, more nodes) and then also writes
<out-dir>/report.json, the same JSON `pclab check --json` prints, prints the same summary,
and exits as the command does (0 same update, 1 different, 2 unusable or no evidence):

    torchrun --standalone --nproc-per-node 4 -m pclab.experiments.trainer_check \\
        --out-dir /tmp/check --accum 2 --trainer my_trainer.py

Under the lab's own launch (`pclab check`, the pages) the command builds the report from the
ranks' outputs; rank 0 builds it only for a hand-typed torchrun, so it is built once a run.
"""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Any

import pclab.experiments.trainer_check.guard as guard
import pclab.experiments.trainer_check.modes as modes
import pclab.experiments.trainer_check.pipeline as pipeline
import pclab.experiments.trainer_check.trainer_file as trainer_file
from pclab.experiments.trainer_check.params import Params
from pclab.experiments.trainer_check.pipeline import Scenario
from pclab.experiments.trainer_check.report import build_report, exit_code
from pclab.experiments.trainer_check.scenarios import Grid
from pclab.experiments.trainer_check.summary import render
from pclab.experiments.trainer_check.units import Units, units_of
from pclab.runners.worker import TOKEN_ENV, finish_worker, init_worker, write_rank_output


def check_trainer(
    path: str,
    accum: int,
    counts: Grid | None,
    tolerance: float,
    rank: int,
    world: int,
    device: str = "cpu",
    units: tuple[int, Units] = (0, Units()),
    counts_given: str = "terms",
) -> dict[str, Any]:
    """This rank's evidence on one trainer file; `units`: the index of its first scenario
    among every file's, and which of them this launch runs; `counts_given`: what --counts
    counts, "terms" (labels placed off position 0 where they fit) or "labels" (anywhere)."""
    first_unit, run = units
    trainer = trainer_file.load(path)
    mode = modes.named(trainer.mode).rank_side()
    grids, skipped = mode.scenarios(trainer, world, accum, counts, counts_given)
    header: dict[str, Any] = {
        "trainer": str(Path(path)),
        **({} if trainer.mode == "token" else {"mode": trainer.mode}),
        "skipped": skipped,
        "dtype": trainer.dtype,
        "max_grad_norm": trainer.max_grad_norm,
        "device": device,
        **mode.header(trainer, counts, counts_given),
    }
    found, scenarios = guard.run_units(
        (run, rank, first_unit),
        (header, mode.SHAPE),
        grids,
        partial(pipeline.preflight, trainer, mode, device),
        lambda name, grid: pipeline.check_scenario(
            trainer,
            mode,
            Scenario(name, grid, counts, counts_given, accum),
            (tolerance, rank, device),
        ),
        device,
    )
    return {**header, "scenarios": scenarios, "diagnoses": found, "units": len(grids)}


def by_hand(payload: dict[str, Any], rank: int, world: int, out_dir: str) -> int:
    """A user's own torchrun: rank 0 gathers every rank's output, writes report.json, prints
    the summary and sends the command's exit code to the other ranks; every rank returns it.
    Every node's torchrun then ends alike: an agent whose ranks all exit 0 waits up to 300 s
    at torchrun's exit barrier for the agents of other nodes, and one whose rank failed never
    comes to it (tests/runners/test_two_nodes.py)."""
    import torch.distributed as dist

    gathered: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(payload, gathered, dst=0)
    code: list[Any] = [0]
    if gathered is not None:
        report = build_report(tuple(gathered))["checks"]
        text = json.dumps(report[0] if len(report) == 1 else report, indent=2)
        Path(out_dir, "report.json").write_text(text + "\n")
        print("\n\n".join(render(check) for check in report), flush=True)
        code = [max(exit_code(check) for check in report)]
    dist.broadcast_object_list(code, src=0)
    return int(code[0])


def main(argv: list[str] | None = None) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    def run() -> None:
        args, units = units_of(argv)
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
        code = 0 if TOKEN_ENV in os.environ else by_hand(payload, rank, world, out_dir)
        finish_worker(code)

    record(run)()  # a raising rank leaves torchrun an error file: the launcher's root cause
