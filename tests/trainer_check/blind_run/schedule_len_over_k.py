"""Blind run-mode trainer: the schedule built for len(epoch) // K updates an epoch (written
for a schedule too short).

By hand, one flat all_reduce of every gradient per window, each window over its own global
count, one optimizer and one scheduler step per window, the tail included, N = 0 skipped by
both; but `num_update_steps_per_epoch = len(epoch) // accum_steps`, the floor the Hugging Face
example scripts once had, so the tails' updates run past the schedule's end (a linear decay
floored at a tenth of the rate).
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "trainers"))
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses  # noqa: E402, F401


def make_scheduler(optimizer, num_updates):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: max(0.1, 1.0 - u / num_updates))


def all_reduce_gradients(model):
    params = list(model.parameters())
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad.copy_(g.view_as(p))


def train_loop(model, optimizer, epochs, accum_steps):
    num_update_steps_per_epoch = len(epochs[0]) // accum_steps
    scheduler = make_scheduler(optimizer, num_update_steps_per_epoch * len(epochs))
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
            all_reduce_gradients(model)
            optimizer.step()
            scheduler.step()
