"""torchtune's full_finetune_distributed recipe, as torchtune_full_finetune.py drives it, with
the label at position 0 of every sequence masked (-100): the recipe counts its tokens before
the shift (`batch["labels"] != ignore_index`), and a label at position 0 is no term of the
shifted loss, so with none there every counted label is a term.

    # in its own environment:
    pclab check examples/frameworks/torchtune/torchtune_full_finetune_masked.py --json

FIRST_POSITION_LABELLED = False: the check never puts a counted label at position 0, as a
dataset that masks it (labels[0] = -100) would hand the recipe.
"""

from pathlib import Path

from torchtune_full_finetune import (
    BATCH_SIZE,
    DTYPE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    token_losses,
)
from torchtune_full_finetune import train_step as _train_step

__all__ = ["BATCH_SIZE", "DTYPE", "FIRST_POSITION_LABELLED", "SEQ_LEN", "VOCAB_SIZE"]
__all__ += ["build_model", "token_losses", "train_step"]
FIRST_POSITION_LABELLED = False
ADAPTER = Path(__file__).stem  # names this setting in the record


def train_step(model, optimizer, microbatches):
    _train_step(model, optimizer, microbatches, ADAPTER)
