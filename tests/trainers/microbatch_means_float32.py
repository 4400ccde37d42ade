"""examples/trainers/microbatch_means.py's wrong step on a float32 model (DTYPE = "float32"):
it fails, and its scheme is still named."""

import _examples  # noqa: F401
import tiny_lm
from microbatch_means import train_step
from tiny_lm import VOCAB_SIZE, token_losses

__all__ = ["DTYPE", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
DTYPE = "float32"


def build_model():
    return tiny_lm.build_model().float()
