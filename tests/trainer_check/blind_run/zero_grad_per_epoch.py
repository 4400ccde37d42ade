"""Blind run-mode trainer: zero_grad once per epoch (written for a gradient leak).

Its own model, no language model: a small tanh network regressing one number, whose terms
are squared errors, one per example. DDP with `no_sync` on all but a window's last
microstep, the loss times the world size over the window's global count (DDP's mean undone),
a step per window, the tail included, N = 0 skipped; but `optimizer.zero_grad()` only at the
start of each epoch, so each update carries every earlier window of its epoch.
"""

import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

BATCH_SIZE = 12


def build_model():
    torch.manual_seed(5)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
    ).double()


def make_microbatch(n_terms, generator):
    x = torch.randn(n_terms, 4, generator=generator, dtype=torch.float64)
    return {"x": x, "y": x.sum(1) + torch.randn(n_terms, generator=generator).double()}


def token_losses(model, microbatch):
    return (model(microbatch["x"]).squeeze(-1) - microbatch["y"]) ** 2


def train_loop(model, optimizer, epochs, accum_steps):
    ddp = DDP(model)
    world = dist.get_world_size()
    for epoch in epochs:
        optimizer.zero_grad()
        for start in range(0, len(epoch), accum_steps):
            window = epoch[start : start + accum_steps]
            n = torch.tensor(float(sum(len(mb["y"]) for mb in window)))
            dist.all_reduce(n)
            if n.item() == 0:
                continue
            for j, mb in enumerate(window):
                last = j == len(window) - 1
                with contextlib.nullcontext() if last else ddp.no_sync():
                    (token_losses(ddp, mb).sum() * world / n).backward()
            optimizer.step()
