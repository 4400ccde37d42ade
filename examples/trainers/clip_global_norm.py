"""Correct, with gradient clipping: the global token mean by hand (correct_manual.py), then
the global norm of the summed gradient clipped once, over every parameter, before the step.
MAX_GRAD_NORM tells the check to clip its reference the same way (as
torch.nn.utils.clip_grad_norm_ does: coefficient max / (norm + 1e-6), at most 1)."""

import torch
import torch.distributed as dist
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_labels, token_losses

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
__all__ += ["MAX_GRAD_NORM"]
MAX_GRAD_NORM = 0.05  # small enough that every scenario's update is clipped


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
        dist.all_reduce(p.grad)  # every rank now holds the whole gradient: clip it there
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    optimizer.step()
