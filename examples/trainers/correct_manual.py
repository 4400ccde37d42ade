"""Correct, by hand: every rank divides its token-loss sums by the GLOBAL count N and the
gradients are summed over ranks. N = 0 is a coordinated skip: no update at all."""

import torch
import torch.distributed as dist
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_labels, token_losses

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def train_step(model, optimizer, microbatches):
    n = torch.tensor(float(count_labels(microbatches)))
    dist.all_reduce(n)  # N over every rank and microstep of this update
    if n.item() == 0:
        return  # nothing to average: every rank skips together
    optimizer.zero_grad()
    for microbatch in microbatches:
        (token_losses(model, microbatch).sum() / n).backward()
    for p in model.parameters():
        if p.grad is None:  # a rank whose microbatches touched nothing still joins the sum
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)  # SUM: each rank already divided by the global N
    optimizer.step()
