"""Blind run-mode trainer: DDP, N = 0 skipping the optimizer and the scheduler (written to
pass).

DDP with `no_sync` on all but a window's last microstep, the loss times the world size over
the window's global count; the windows' counts are agreed up front so the cosine schedule
(with its own optimizer rate, SGD 0.05) is built for the updates actually taken; a window
with N = 0 steps nothing.
"""

import contextlib
import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.05)


def make_scheduler(optimizer, num_updates):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda u: 0.55 + 0.45 * math.cos(math.pi * u / num_updates)
    )


def train_loop(model, optimizer, epochs, accum_steps):
    ddp, k = DDP(model), accum_steps
    windows = [[e[s : s + k] for s in range(0, len(e), k)] for e in epochs]
    totals = torch.tensor([[count_labels(w) for w in row] for row in windows]).double()
    dist.all_reduce(totals)
    scheduler = make_scheduler(optimizer, int((totals > 0).sum()))
    for row, counts in zip(windows, totals.tolist()):
        for window, n in zip(row, counts):
            if n == 0:
                continue
            for j, mb in enumerate(window):
                sync = j == len(window) - 1
                with contextlib.nullcontext() if sync else ddp.no_sync():
                    (token_losses(ddp, mb).sum() * dist.get_world_size() / n).backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
