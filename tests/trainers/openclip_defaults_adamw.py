"""The OpenCLIP defaults' adapter (examples/frameworks/openclip/openclip_global_loss.py) checked
with AdamW, the optimizer OpenCLIP trains with (lr 1e-3, eps 1e-8, weight decay 0.1): the towers'
gradient is still x 1/P, but Adam divides each gradient by its own running magnitude, so a constant
factor cancels in the step up to eps; the moments keep it."""

import _examples  # noqa: F401
import torch
from openclip_global_loss import (
    SYMMETRIC,
    batch_loss,
    build_model,
    embed,
    embedding_loss,
    make_microbatch,
    train_step,
)

__all__ = [
    "SYMMETRIC",
    "batch_loss",
    "build_model",
    "embed",
    "embedding_loss",
    "make_microbatch",
    "train_step",
]


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-3, eps=1e-8, weight_decay=0.1)
