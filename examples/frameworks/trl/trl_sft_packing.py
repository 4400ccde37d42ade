"""TRL's `SFTTrainer` with packing=True (its default strategy, best-fit decreasing, which also
turns padding_free on): SFTTrainer packs the documents into rows of max_length tokens, and
each microstep is one packed row. Everything else is trl_sft.py's.

    pclab check examples/frameworks/trl/trl_sft_packing.py --json

Packing changes what a microbatch is: the documents, not the rows they arrive in, are the
data. So a microbatch here is one packed row's worth: documents of exactly max_length =
BATCH_SIZE x (SEQ_LEN + 1) tokens between them, n_terms of them terms (a document of w words is
w + 1 tokens and w terms, so n_terms terms take max_length - n_terms documents). Each rank's K
microbatches fill exactly K rows, so both ranks take K microsteps, as the check's shape says;
which documents share a row is SFTTrainer's choice, not the check's (the record shows each
microstep's row and terms). The check still tells the schemes apart: a wrong normalisation
weights the ranks' documents differently (their totals differ), whatever rows they were packed
into. token_losses runs each document in its own padded row: the reference knows nothing of
the packed layout, so a document attending across its row's boundaries would show too.
"""

from pathlib import Path

from trl_sft import (
    BATCH_SIZE,
    DTYPE,
    MAX_GRAD_NORM,
    ROW_TOKENS,
    SEQ_LEN,
    build_model,
    documents_of,
    split,
    token_losses,
)
from trl_sft import train_step as _train_step

__all__ = ["BATCH_SIZE", "DTYPE", "MAX_GRAD_NORM", "SEQ_LEN"]
__all__ += ["build_model", "make_microbatch", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem
MAX_LENGTH = BATCH_SIZE * ROW_TOKENS  # SFTConfig.max_length: the packed row, in tokens


def make_microbatch(n_terms, generator):
    """MAX_LENGTH - n_terms documents of n_terms words between them (each at most SEQ_LEN)."""
    documents = MAX_LENGTH - n_terms
    return documents_of(split(n_terms, documents, SEQ_LEN, generator), generator)


def train_step(model, optimizer, microbatches):
    _train_step(
        model, optimizer, microbatches, ADAPTER, rows=1, packing=True, max_length=MAX_LENGTH
    )
