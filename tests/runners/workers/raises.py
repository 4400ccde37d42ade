"""Tiny worker for launcher tests: rank 1 divides by zero; the others wait in a collective.

It uses no launcher helper except init_worker, like any plain torchrun script."""

import argparse

import torch
import torch.distributed as dist

from pclab.runners.worker import init_worker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    parser.parse_args()
    rank, _ = init_worker()
    if rank == 1:
        1 / 0  # noqa: B018 - the deliberate root cause
    dist.all_reduce(torch.zeros(1))


if __name__ == "__main__":
    main()
