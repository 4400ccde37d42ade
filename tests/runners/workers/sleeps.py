"""Tiny worker for the fault tests: no torch, no process group - each rank sleeps, then
reports its pid and the request's tag. Cheap enough to launch a dozen times. With
--temp-prefix each rank first makes a temporary folder it never removes (as a trainer's
`TemporaryDirectory` stays when its rank is killed)."""

import argparse
import os
import tempfile
import time

from pclab.runners.worker import write_rank_output


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--tag", default="")
    parser.add_argument("--temp-prefix", default="")
    args = parser.parse_args()
    if args.temp_prefix:
        tempfile.mkdtemp(prefix=args.temp_prefix)
    time.sleep(args.seconds)
    rank = int(os.environ["RANK"])
    write_rank_output(args.out_dir, rank, {"rank": rank, "tag": args.tag, "pid": os.getpid()})


if __name__ == "__main__":
    main()
