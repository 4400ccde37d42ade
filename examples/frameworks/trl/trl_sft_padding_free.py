"""TRL's `SFTTrainer` with padding_free=True: its collator concatenates a microbatch's documents
into one row without padding, restarts position_ids at each document and masks each document's
first label (no document predicts the next one's first token). Everything else is trl_sft.py's.

    pclab check examples/frameworks/trl/trl_sft_padding_free.py --json

max_length=None, as SFTTrainer requires with padding_free and no packing (it raises
otherwise); no document here is longer than SEQ_LEN + 1 tokens. token_losses still runs each
document in its own padded row, so the reference does not share the flattened layout.
"""

from pathlib import Path

from trl_sft import (
    BATCH_SIZE,
    DTYPE,
    MAX_GRAD_NORM,
    SEQ_LEN,
    build_model,
    make_microbatch,
    token_losses,
)
from trl_sft import train_step as _train_step

__all__ = ["BATCH_SIZE", "DTYPE", "MAX_GRAD_NORM", "SEQ_LEN"]
__all__ += ["build_model", "make_microbatch", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem


def train_step(model, optimizer, microbatches):
    _train_step(model, optimizer, microbatches, ADAPTER, padding_free=True, max_length=None)
