"""Correct, in float32: correct_manual.py's step on a float32 model. DTYPE = "float32" runs the
reference in float32 too; the tolerance is then measured, not 1e-10: ten times the
reference's own floor (its gap to itself with the microbatches summed in the other order, and
at least one unit in the last place of its largest parameter), printed beside the verdict."""

import tiny_lm
from correct_manual import train_step
from tiny_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, token_losses

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses"]
__all__ += ["train_step"]
DTYPE = "float32"


def build_model():
    return tiny_lm.build_model().float()
