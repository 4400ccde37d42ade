"""Blind run-mode trainer: zero_grad_per_epoch.py's loop and data on a plain linear
regression (5 parameters), the model many a first regression trainer has: the same leak,
on a model whose 5 parameters are fewer than the microbatch gradients an update may carry.
"""

import torch
from zero_grad_per_epoch import BATCH_SIZE, make_microbatch, token_losses, train_loop  # noqa: F401


def build_model():
    torch.manual_seed(5)
    return torch.nn.Linear(4, 1).double()
