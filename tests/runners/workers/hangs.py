"""Tiny worker for launcher tests: rank 0 reports, then waits in a collective for rank 1,
which sleeps forever. Only a timeout can end it: the wall clock's or the process group's."""

import argparse
import time

import torch
import torch.distributed as dist

from pclab.runners.worker import init_worker, write_rank_output


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()
    rank, _ = init_worker()
    if rank == 1:
        while True:
            time.sleep(1)
    write_rank_output(args.out_dir, rank, {"rank": rank})
    dist.all_reduce(torch.zeros(1))


if __name__ == "__main__":
    main()
