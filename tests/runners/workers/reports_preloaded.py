"""Tiny worker for the warm-pool tests: each rank reports whether the lab's runner modules
were already loaded when it started (the zygote preloads them unless a file changed)."""

import argparse
import os
import sys

if __name__ == "__main__":
    preloaded = (
        "pclab.experiments.negatives.worker" in sys.modules
    )  # before this worker imports anything
    from pclab.runners.worker import write_rank_output

    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    write_rank_output(args.out_dir, rank, {"rank": rank, "preloaded": preloaded})
