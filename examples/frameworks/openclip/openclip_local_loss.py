"""OpenCLIP's ClipLoss with local_loss=True, gather_with_grad=False: each rank scores its own
images and texts against every rank's, gathered without gradient (its own rows too, as
gather_features leaves them for local_loss); DDP averages (openclip_clip_loss.py)."""

from openclip_clip_loss import build_model, clip_step, embed, embedding_loss, make_microbatch

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    clip_step(model, optimizer, microbatches, "openclip_local_loss", local_loss=True)
