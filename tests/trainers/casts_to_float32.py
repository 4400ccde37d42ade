"""A correct step in float32: train_step casts the float64 model down first (as a stray
model.float() would), so its update differs from the float64 reference by rounding."""

import _examples  # noqa: F401
import correct_manual
from tiny_lm import VOCAB_SIZE, build_model, token_losses

__all__ = ["VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def train_step(model, optimizer, microbatches):
    model.float()
    correct_manual.train_step(model, optimizer, microbatches)
