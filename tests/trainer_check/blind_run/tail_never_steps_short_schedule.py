"""Blind run-mode trainer: a step only every K-th microbatch of an epoch, and the schedule
built for the steps that loop takes (written for a dropped tail with a schedule that fits the
loop, not the run: litgpt's and torchtune's loops).

By hand: each window's global count is agreed up front, each microbatch's summed loss is
divided by it, and the loop steps when (i + 1) % K == 0, zeroing only after a step; the
schedule, a cosine to 0, is built for len(epoch) // K updates an epoch and stepped after each
optimizer step. The tails are never stepped (their gradients join the next epoch's first
update), and the run's updates number ceil(len / K) an epoch, not len // K.
"""

import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def make_scheduler(optimizer, num_updates):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda u: 0.5 * (1 + math.cos(math.pi * u / num_updates))
    )


def train_loop(model, optimizer, epochs, accum_steps):
    k = accum_steps
    scheduler = make_scheduler(optimizer, len(epochs) * (len(epochs[0]) // k))
    for epoch in epochs:
        local = [count_labels(epoch[s : s + k]) for s in range(0, len(epoch), k)]
        totals = torch.tensor(local, dtype=torch.float64)
        dist.all_reduce(totals)
        for i, mb in enumerate(epoch):
            n = totals[i // k].item()
            if n > 0:
                (token_losses(model, mb).sum() / n).backward()
            if (i + 1) % k == 0 and n > 0:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                optimizer.step()
                optimizer.zero_grad()
                scheduler.step()
