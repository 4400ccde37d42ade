"""A no-op job for the lab's own launcher: a torchrun worker that joins a Gloo group and does
nothing.

Each rank only initialises the process group, meets the others at one barrier, writes the
signed `rank<RANK>.json` the launcher waits for (through the lab's worker API, so it imports
`pclab.runners.worker`), and leaves. Timing an experiment against this job, launched the same
way (`runners.launcher.launch`, or the warm pool), isolates what the experiment's workers add
on top of the launcher, torchrun, importing torch and the Gloo rendezvous. It is not the bare
baseline of the command line: that is bench/bare_worker.py, which imports nothing of the lab.

With --one-ddp-step each rank also wraps a 2-parameter model in DDP and takes one SGD step:
nothing the lab needs, but it makes torch import torch._dynamo (DistributedDataParallel's
constructor and every optimizer do), the fixed cost every experiment pays on top of the
bare job.

    python -c "from pclab.runners.launcher import launch; print(launch('bench.noop_worker', 2))"
    torchrun --standalone --nproc-per-node 2 -m bench.noop_worker --out-dir /tmp/noop
"""

from __future__ import annotations

import argparse
import os

from pclab.runners.worker import write_rank_output


def main(argv: list[str] | None = None) -> None:
    """init_process_group(gloo) + barrier + destroy, and the one JSON line the launcher reads."""
    import torch.distributed as dist

    parser = argparse.ArgumentParser(prog="bench.noop_worker")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--one-ddp-step", action="store_true")
    args = parser.parse_args(argv)
    dist.init_process_group(backend="gloo")
    dist.barrier()
    if args.one_ddp_step:
        import torch
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(torch.nn.Linear(1, 1, dtype=torch.float64))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 1, dtype=torch.float64)).sum().backward()
        optimizer.step()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    write_rank_output(args.out_dir, rank, {"rank": rank, "world_size": world_size})
    dist.destroy_process_group()


if __name__ == "__main__" and "RANK" in os.environ:
    main()
