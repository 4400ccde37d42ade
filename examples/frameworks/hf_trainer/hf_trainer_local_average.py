"""The real Hugging Face `transformers.Trainer` with `average_tokens_across_devices=False`: each
rank normalises by its own label count. Everything else is hf_trainer.py's.

    pclab check examples/frameworks/hf_trainer/hf_trainer_local_average.py --json
"""

from hf_trainer import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses
from hf_trainer import train_step as _train_step

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
AVERAGE_TOKENS_ACROSS_DEVICES = False


def train_step(model, optimizer, microbatches):
    _train_step(model, optimizer, microbatches, average_tokens=AVERAGE_TOKENS_ACROSS_DEVICES)
