"""OpenCLIP's ClipLoss with local_loss=True, gather_with_grad=False: each rank scores its own
images against every rank's texts and its own texts against every rank's images, all gathered
without gradient (its own rows too: gather_features puts the local rows back with their graph
only `if not local_loss`); DDP averages (openclip_clip_loss.py). With SYMMETRIC = True the
check names it `query_path_only` in each direction:
(1/P) sum_r (l(I_r, sg(T_all)) + l(T_r, sg(I_all))) / 2, each tower trained only through its
own rows as queries (before the check took a symmetric loss's directions: `other`)."""

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
    clip_step(model, optimizer, microbatches, "openclip_local_loss", local_loss=True)
