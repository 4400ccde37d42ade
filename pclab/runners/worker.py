"""The worker-side API: what every rank of every experiment calls, and nothing else.

    rank, world_size = init_worker()          # Gloo on CPU (NCCL with CUDA), float64
    ...compute...
    write_rank_output(out_dir, rank, payload)  # <out_dir>/rank<rank>.json, signed

Workers know nothing about the launcher beyond these calls, so they run unchanged under a
hand-typed `torchrun` with more ranks or more nodes:

    torchrun --standalone --nproc-per-node 2 -m pclab.experiments.negatives --out-dir /tmp/o
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from pclab.runners.protocol import RankOutput, payload_sha256  # noqa: F401 - re-exported
from pclab.runners.settings import ENV_NAMES, Settings, parse

PG_TIMEOUT_ENV = ENV_NAMES["pg_timeout_s"]  # the process-group timeout a launch hands its ranks
# Marks every process of one launch, so none can escape the sweep (runners.processes); a rank
# that sees it knows the lab launched it. Declared here, with the rest of what a rank reads,
# so a rank need not import the launching layer to read it.
TOKEN_ENV = "PCL_LAUNCH_TOKEN"
# A warm-pool rank's pipe to its zygote (set by runners.zygote): `finish_worker` says "0"
# there before exiting, so the zygote's reply does not wait for the address space to go.
EXIT_CODE_FD: list[int] = []


def init_worker(pg_timeout_s: float | None = None, backend: str | None = None) -> tuple[int, int]:
    """Join the process group torchrun set up; returns (rank, world_size).

    Gloo on CPU, NCCL (one device per local rank) when CUDA is present; float64 by default.
    `backend` "gloo" or "nccl" chooses instead of CUDA's presence (the trainer check: Gloo
    unless --device cuda). `pg_timeout_s` defaults to the launcher's PCL_PG_TIMEOUT_S, else
    60 s (a hand-typed torchrun's value is checked as the server checks it: 1 to 3600 s).
    """
    import torch
    import torch.distributed as dist

    if pg_timeout_s is None:
        written = os.environ.get(PG_TIMEOUT_ENV)
        pg_timeout_s = Settings.pg_timeout_s if written is None else parse("pg_timeout_s", written)
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=pg_timeout_s))
    return dist.get_rank(), dist.get_world_size()


def worker_device() -> Any:
    """The torch device this rank computes on: its local CUDA device, else the CPU."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def write_rank_output(out_dir: str | os.PathLike[str], rank: int, payload: dict[str, Any]) -> None:
    """Write `<out_dir>/rank<rank>.json` atomically, with a "sha256" of the payload added."""
    path = Path(out_dir) / f"rank{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(RankOutput(rank, payload).encode())
    os.replace(partial, path)  # the launcher never sees a half-written file


def finish_worker(exit_code: int = 0) -> None:
    """End this rank: wait for every rank, leave the process group, and exit at once (with
    `exit_code`: a hand-typed torchrun's verdict).

    The barrier keeps a rank from tearing down a connection a peer still uses; exiting with
    os._exit skips interpreter finalisation, where Gloo's threads were seen to abort a rank
    that had already written its output ("terminate called without an active exception",
    about one run in ten on a loaded 2-core box). The rank's output file is complete by then.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    for fd in EXIT_CODE_FD:
        os.write(fd, f"{exit_code}\n".encode())
    os._exit(exit_code)
