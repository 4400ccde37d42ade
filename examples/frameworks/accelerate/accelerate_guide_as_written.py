"""Hugging Face Accelerate, the gradient-accumulation guide's skeleton code exactly as written:
everything accelerate_guide.py does, but the count is the code's
`(batch["labels"].ne(-100)).sum()`, every label, where the guide's text says to count
`labels[..., 1:]` for a causal LM that shifts its labels. A label at position 0 is counted in
N but is never a term.

    pclab check examples/frameworks/accelerate/accelerate_guide_as_written.py --json
"""

import sys
from pathlib import Path

from accelerate_guide import guide_step

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import BATCH_SIZE, IGNORE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def every_label(batch):
    return (batch["labels"].ne(IGNORE)).sum()


def train_step(model, optimizer, microbatches):
    guide_step(model, optimizer, microbatches, every_label, ADAPTER)
