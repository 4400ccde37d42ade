"""Tiny worker for the fault tests: every rank reports at once (so a test sees it running),
then all ranks keep meeting in an all-reduce for --seconds and leave after the same round.
Killing one rank from outside leaves its peers stranded in a collective - the crash the
launcher must name."""

import argparse
import os
import time

import torch
import torch.distributed as dist

from pclab.runners.worker import init_worker, write_rank_output


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    rank, _ = init_worker()
    write_rank_output(args.out_dir, rank, {"rank": rank, "pid": os.getpid()})
    end = time.monotonic() + args.seconds
    while True:
        # Each rank's clock says whether to go on; the minimum decides for all, so every rank
        # leaves after the same round (none is left alone in a collective its peer skipped).
        more = torch.tensor([1.0 if time.monotonic() < end else 0.0])
        dist.all_reduce(more, op=dist.ReduceOp.MIN)
        if more.item() == 0.0:
            break
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
