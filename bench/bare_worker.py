"""The command line's baseline: a torchrun job that imports torch and nothing of the lab.

Each rank joins a Gloo group, wraps a 2-parameter float64 model in DistributedDataParallel,
takes one SGD step (what makes torch import torch._dynamo, as every DDP job does), writes one
line of JSON to `<out-dir>/rank<RANK>.json`, leaves the group and exits at once: what any
data-parallel job pays for torchrun, torch, the rendezvous and one step. bench/cli.py times the
lab's commands
against it; tests/test_bench_smoke.py holds it to importing no module of `pclab`.

    torchrun --standalone --nproc-per-node 2 bench/bare_worker.py --out-dir /tmp/bare

(As a file path, not `-m bench.bare_worker`: `-m` would import the `bench` package first.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench/bare_worker.py")
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args(argv)
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(torch.nn.Linear(1, 1, dtype=torch.float64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 1, dtype=torch.float64)).sum().backward()
    optimizer.step()
    out = Path(args.out_dir) / f"rank{rank}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rank": rank, "world_size": world_size}) + "\n")
    dist.destroy_process_group()
    # End as the lab's ranks end (runners.worker.finish_worker): at once, without the
    # interpreter's teardown of torch. A baseline that paid for that teardown would be slower
    # than the lab's ranks for a reason of its own, and flatter every ratio taken against it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__" and "RANK" in os.environ:
    main()
