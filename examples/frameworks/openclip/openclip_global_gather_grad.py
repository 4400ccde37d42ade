"""OpenCLIP's ClipLoss with local_loss=False, gather_with_grad=True: every rank takes the
whole batch's loss over features gathered by torch.distributed.nn.all_gather, whose backward
sums every rank's gradient into the owner's rows; DDP averages (openclip_clip_loss.py)."""

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
    clip_step(model, optimizer, microbatches, "openclip_global_gather_grad", gather_with_grad=True)
