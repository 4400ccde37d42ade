"""The correct global-norm clipping of examples/trainers/clip_global_norm.py, in a file that
does not declare MAX_GRAD_NORM: the reference does not clip, and every weight x N is the one
clip coefficient (normalisation right, update scaled)."""

import _examples  # noqa: F401
import clip_global_norm
from tiny_lm import VOCAB_SIZE, build_model, token_losses

__all__ = ["VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def train_step(model, optimizer, microbatches):
    clip_global_norm.train_step(model, optimizer, microbatches)
