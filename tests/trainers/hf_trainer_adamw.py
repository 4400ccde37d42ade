"""The bundled Hugging Face Trainer adapter (examples/frameworks/hf_trainer/hf_trainer.py) checked
with AdamW, Trainer's default optimizer family, at weight decay 0: its weights are the global token
mean's, and with no label in the whole update Trainer still steps, so AdamW's step count and moments
appear where the reference has none."""

import _examples  # noqa: F401
import torch
from hf_trainer import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses, train_step

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
