"""Blind run-mode trainer: the scheduler stepped at every microbatch (written for a rate
K times too fast).

DDP with `no_sync`, the loss times the world size over the window's global count, one
optimizer step per window, the tail included, and a schedule built for the true number of
updates; but `scheduler.step()` sits at the end of the microbatch loop, outside the
`if` that steps the optimizer (the Hugging Face example loops' shape). Windows with N = 0 are
skipped whole, the scheduler with them.
"""

import contextlib
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def make_scheduler(optimizer, num_updates):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: 1.0 - 0.5 * u / num_updates)


def train_loop(model, optimizer, epochs, accum_steps):
    ddp = DDP(model)
    k, world = accum_steps, dist.get_world_size()
    local = [[count_labels(e[s : s + k]) for s in range(0, len(e), k)] for e in epochs]
    totals = torch.tensor(local, dtype=torch.float64)  # every epoch has the same length
    dist.all_reduce(totals)
    scheduler = make_scheduler(optimizer, int((totals > 0).sum()))
    for epoch, row in zip(epochs, totals.tolist()):
        for step, mb in enumerate(epoch):
            n = row[step // k]
            if n == 0:
                continue
            end = (step + 1) % k == 0 or step + 1 == len(epoch)
            with contextlib.nullcontext() if end else ddp.no_sync():
                (token_losses(ddp, mb).sum() * world / n).backward()
            if end:
                optimizer.step()
                optimizer.zero_grad()
            scheduler.step()
