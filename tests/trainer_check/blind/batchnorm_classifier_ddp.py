"""Blind trainer g: a BatchNorm classifier under plain DDP (expected `rank_pool`).

`batch_loss` is the cross-entropy of the classifier on every sample handed in, BatchNorm in
training mode over all of them. The step wraps the model in DistributedDataParallel, runs
this rank's K microbatches as one batch (so the statistics are this rank's), and lets DDP
average the gradients.
"""

import torch
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

FEATURES = 3
CLASSES = 4


def build_model():
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 5),
        torch.nn.BatchNorm1d(5),
        torch.nn.ReLU(),
        torch.nn.Linear(5, CLASSES),
    ).double()


def make_microbatch(n, generator):
    x = torch.randn(n, FEATURES, generator=generator, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (n,), generator=generator)
    return {"x": x, "y": y}


def batch_loss(model, microbatches):
    x = torch.cat([mb["x"] for mb in microbatches])
    y = torch.cat([mb["y"] for mb in microbatches])
    return F.cross_entropy(model(x), y)


def train_step(model, optimizer, microbatches):
    ddp = DistributedDataParallel(model)
    optimizer.zero_grad()
    batch_loss(ddp, microbatches).backward()
    optimizer.step()
