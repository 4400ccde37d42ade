"""Tiny worker for the zygote tests: rank 1 is killed (SIGKILL, as by the OOM killer) before
it joins the process group; rank 0 goes on to join it and would wait there for its peer."""

import argparse
import os
import signal

import torch
import torch.distributed as dist

from pclab.runners.worker import init_worker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    parser.parse_args()
    if os.environ.get("RANK") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    init_worker()
    dist.all_reduce(torch.zeros(1))


if __name__ == "__main__":
    main()
