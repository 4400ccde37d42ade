"""OpenCLIP's ClipLoss with local_loss=True, gather_with_grad=True (what OpenCLIP's trained
models used, open_clip#894): each rank scores its own rows against every rank's, gathered by
torch.distributed.nn.all_gather with its backward; DDP averages (openclip_clip_loss.py)."""

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
    clip_step(
        model,
        optimizer,
        microbatches,
        "openclip_local_gather_grad",
        local_loss=True,
        gather_with_grad=True,
    )
