"""OpenCLIP's ClipLoss at its defaults (local_loss=False, gather_with_grad=False) with the
loss multiplied by P before backward: the compensation tevatron uses for a gather without
gradient (tevatron#30), copied to a model whose temperature is learned. The encoder's 1/P is
undone; the temperature, already whole on every rank, gets P times (openclip_clip_loss.py)."""

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
    clip_step(model, optimizer, microbatches, "openclip_times_world_size", times_world_size=True)
