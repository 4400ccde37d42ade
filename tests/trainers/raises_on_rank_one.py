"""A trainer whose train_step raises on rank 1 only (line 14), while rank 0 waits in a
collective: the check must name this file and line, and leave no process behind."""

import _examples  # noqa: F401
import torch.distributed as dist
from correct_manual import VOCAB_SIZE, build_model, token_losses
from correct_manual import train_step as correct

__all__ = ["VOCAB_SIZE", "build_model", "token_losses"]


def train_step(model, optimizer, microbatches):
    if dist.get_rank() == 1:
        raise ZeroDivisionError("rank 1 divided by zero")
    correct(model, optimizer, microbatches)
