"""Blind run-mode trainer: N = 0 skipping both the optimizer and the scheduler, the schedule
built for ceil(len / K) updates an epoch (written for a schedule longer than the run where a
window is empty).

By hand, each window over its global count, the tail included, one optimizer and one
scheduler step per update; the schedule's length counts every window, so a run with a
window of N = 0 ends before its schedule does.
"""

import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def make_scheduler(optimizer, num_updates):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: 1.0 - 0.5 * u / num_updates)


def train_loop(model, optimizer, epochs, accum_steps):
    per_epoch = math.ceil(len(epochs[0]) / accum_steps)
    scheduler = make_scheduler(optimizer, per_epoch * len(epochs))
    for epoch in epochs:
        for start in range(0, len(epoch), accum_steps):
            window = epoch[start : start + accum_steps]
            n = torch.tensor(float(count_labels(window)))
            dist.all_reduce(n)
            if n.item() == 0:
                continue
            optimizer.zero_grad()
            for mb in window:
                (token_losses(model, mb).sum() / n).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
            scheduler.step()
