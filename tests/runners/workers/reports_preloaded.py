"""Tiny worker for the warm-pool tests: each rank reports whether the lab's runner modules
were already loaded when it started (the zygote preloads them unless a file changed), and
whether the Transformer's step-800 start and windows were loaded too (its worker's preload())."""

import argparse
import os
import sys

if __name__ == "__main__":
    # before this worker imports anything
    preloaded = "pclab.experiments.negatives.worker" in sys.modules
    branches = sys.modules.get("pclab.experiments.transformer.lm.branches")
    data = sys.modules.get("pclab.experiments.transformer.lm.data")
    start_loaded = branches is not None and branches.shared_start.cache_info().currsize == 1
    windows_loaded = data is not None and len(data._LAST_CUT) == 1
    from pclab.runners.worker import write_rank_output

    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    payload = {"rank": rank, "preloaded": preloaded, "start": start_loaded}
    write_rank_output(args.out_dir, rank, payload | {"windows": windows_loaded})
