"""Composer's trainer at N = 0: the loss divided by the global label count in plain Python
(line 20) raises ZeroDivisionError on every rank in no_labels. The check must judge that
scenario `different` with `trainer_error` (this file, line 20) and still judge the others:
they are the same update."""

import _examples  # noqa: F401
import torch
import torch.distributed as dist
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, count_labels, token_losses

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses"]


def train_step(model, optimizer, microbatches):
    n = torch.tensor(float(count_labels(microbatches)))
    dist.all_reduce(n)
    optimizer.zero_grad()
    total = int(n.item())
    for microbatch in microbatches:
        (token_losses(model, microbatch).sum() * (1 / total)).backward()
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
    optimizer.step()
