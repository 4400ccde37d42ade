"""correct_manual.py's step on a bfloat16 model, with DTYPE = "bfloat16": the reference runs
in bfloat16 and the tolerance comes from its measured floor."""

import _examples  # noqa: F401
import tiny_lm
from correct_manual import train_step
from tiny_lm import VOCAB_SIZE, token_losses

__all__ = ["DTYPE", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
DTYPE = "bfloat16"


def build_model():
    return tiny_lm.build_model().bfloat16()
