"""OpenCLIP's ClipLoss as it defaults: local_loss=False, gather_with_grad=False. Every rank
takes the whole batch's loss over features gathered without gradient, its own put back with
their graph; DDP averages. Expected: the encoder gets 1/P of the global gradient, the
temperature all of it (openclip_clip_loss.py says how ClipLoss is loaded and driven)."""

from openclip_clip_loss import (
    SYMMETRIC,
    batch_loss,
    build_model,
    clip_step,
    embed,
    embedding_loss,
    make_microbatch,
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


def train_step(model, optimizer, microbatches):
    clip_step(model, optimizer, microbatches, "openclip_global_loss")
