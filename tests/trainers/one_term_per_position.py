"""token_losses returns one loss per position (0 where the label is -100) instead of one per
counted label: more terms than the contract's, so no verdict on train_step is possible."""

import _examples  # noqa: F401
from correct_manual import train_step
from tiny_lm import VOCAB_SIZE, build_model
from torch.nn import functional as F

__all__ = ["VOCAB_SIZE", "build_model", "train_step"]


def token_losses(model, microbatch):
    logits = model(microbatch["input_ids"])
    return F.cross_entropy(logits.flatten(0, 1), microbatch["labels"].flatten(), reduction="none")
