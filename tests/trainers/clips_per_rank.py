"""Clipping before the gradients are summed: each rank clips its own partial gradient, so
each rank's tokens get their own coefficient (page 08's per-rank clipping)."""

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
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)  # the bug: local norm
    for p in model.parameters():
        dist.all_reduce(p.grad)
    optimizer.step()
