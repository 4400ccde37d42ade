"""Wrong for a batch-coupled model: a BatchNorm classifier under plain DDP. Each rank
normalises with its own items' statistics (and each microbatch with its own, under
accumulation), so the objective is a pool per rank, not the global batch's: batch_loss
says what one process over every item computes. SyncBatchNorm, or GradCache-like
recomputation, is what shares the statistics."""

import contextlib

import torch
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

__all__ = ["batch_loss", "build_model", "make_microbatch", "train_step"]


def build_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Tanh(), torch.nn.Linear(4, 2)
    )
    return model.double()


def make_microbatch(n, generator):
    x = torch.randn(n, 3, generator=generator, dtype=torch.float64)
    return {"x": x, "y": torch.randint(0, 2, (n,), generator=generator)}


def batch_loss(model, microbatches):
    """The objective over every item given, in one forward: one set of batch statistics."""
    x = torch.cat([mb["x"] for mb in microbatches])
    return F.cross_entropy(model(x), torch.cat([mb["y"] for mb in microbatches]))


def train_step(model, optimizer, microbatches):
    ddp = DDP(model)
    optimizer.zero_grad()
    last = len(microbatches) - 1
    for k, mb in enumerate(microbatches):
        with contextlib.nullcontext() if k == last else ddp.no_sync():
            loss = F.cross_entropy(ddp(mb["x"]), mb["y"])
            (loss / len(microbatches)).backward()
    optimizer.step()
