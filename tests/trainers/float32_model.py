"""A float32 model in a file that declares no DTYPE (float64 is the default)."""

import _examples  # noqa: F401
import tiny_lm
from correct_manual import train_step
from tiny_lm import VOCAB_SIZE, token_losses

__all__ = ["VOCAB_SIZE", "token_losses", "train_step"]


def build_model():
    return tiny_lm.build_model().float()
