"""Clipping with a double-counted norm: every rank holds the whole summed gradient, and the
squared norms are summed over the ranks anyway, so the norm is sqrt(P) too large and the
update is scaled down once more (page 08's double counting)."""

import _examples  # noqa: F401
import torch
import torch.distributed as dist
from clip_global_norm import MAX_GRAD_NORM
from tiny_lm import VOCAB_SIZE, build_model, count_labels, token_losses

__all__ = ["MAX_GRAD_NORM", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def train_step(model, optimizer, microbatches):
    n = torch.tensor(float(count_labels(microbatches)))
    dist.all_reduce(n)
    if n.item() == 0:
        return
    optimizer.zero_grad()
    for microbatch in microbatches:
        (token_losses(model, microbatch).sum() / n).backward()
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)  # every rank now holds the full gradient
    squared = sum(p.grad.pow(2).sum() for p in model.parameters())
    dist.all_reduce(squared)  # the bug: a replicated gradient counted P times
    coefficient = min(1.0, MAX_GRAD_NORM / (float(squared.sqrt()) + 1e-6))
    for p in model.parameters():
        p.grad.mul_(coefficient)
    optimizer.step()
