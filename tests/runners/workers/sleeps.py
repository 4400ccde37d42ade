"""Tiny worker for the fault tests: no torch, no process group - each rank sleeps, then
reports its pid and the request's tag. Cheap enough to launch a dozen times. With
--temp-prefix each rank first makes a temporary folder it never removes (as a trainer's
`TemporaryDirectory` stays when its rank is killed)."""

import argparse
import os
import tempfile
import time
from pathlib import Path

from pclab.runners.worker import write_rank_output


def _meet(folder: Path, parties: int, limit_s: float = 300.0) -> None:
    (folder / f"{os.getpid()}").touch()
    deadline = time.monotonic() + limit_s
    while len(list(folder.iterdir())) < parties:
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier: {parties} parties never met in {folder}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--tag", default="")
    # A rendezvous across launches: each rank leaves a file in this folder, then waits until
    # `--parties` files are there, so runs that must overlap really do, however loaded the box.
    parser.add_argument("--barrier", default=None)
    parser.add_argument("--parties", type=int, default=0)
    parser.add_argument("--temp-prefix", default="")
    args = parser.parse_args()
    if args.temp_prefix:
        tempfile.mkdtemp(prefix=args.temp_prefix)
    if args.barrier:
        _meet(Path(args.barrier), args.parties)
    time.sleep(args.seconds)
    rank = int(os.environ["RANK"])
    write_rank_output(args.out_dir, rank, {"rank": rank, "tag": args.tag, "pid": os.getpid()})


if __name__ == "__main__":
    main()
