"""Unusable (a test file): batch_loss returns one loss per item, not the scalar objective
of the update, so the coupled check stops before any scenario (objective_invalid)."""

import torch
from torch.nn import functional as F

__all__ = ["batch_loss", "build_model", "make_microbatch", "train_step"]


def build_model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2).double()


def make_microbatch(n, generator):
    x = torch.randn(n, 3, generator=generator, dtype=torch.float64)
    return {"x": x, "y": torch.randint(0, 2, (n,), generator=generator)}


def batch_loss(model, microbatches):
    x = torch.cat([mb["x"] for mb in microbatches])
    y = torch.cat([mb["y"] for mb in microbatches])
    return F.cross_entropy(model(x), y, reduction="none")  # a vector: the slip


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    optimizer.step()
