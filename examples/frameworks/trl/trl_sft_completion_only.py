"""TRL's `SFTTrainer` with completion_only_loss=True on prompt-completion data (its default for
such data): SFTTrainer tokenizes each prompt and prompt + completion, and its labels are the
completion's tokens, the end of sequence included; the prompt's are -100. Everything else is
trl_sft.py's.

    pclab check examples/frameworks/trl/trl_sft_completion_only.py --json

make_microbatch writes BATCH_SIZE prompt-completion pairs holding n_terms terms: a pair of t >= 1
terms has a prompt of at least one word and a completion of t - 1 words (t tokens with its end
of sequence, each predicted from the token before it); t = 0 is the empty pair, the end of
sequence alone, whose one label is at position 0 and never a term (a pair with a prompt and no
label would be dropped by SFTTrainer, and the microstep with it). Its "input_ids" and
"labels", which only token_losses reads, are built here from the same words.
"""

from pathlib import Path

import torch
from trl_sft import (
    BATCH_SIZE,
    DTYPE,
    MAX_GRAD_NORM,
    ROW_TOKENS,
    SEQ_LEN,
    as_text,
    build_model,
    checked_rows,
    random_words,
    split,
    token_losses,
)
from trl_sft import train_step as _train_step

__all__ = ["BATCH_SIZE", "DTYPE", "MAX_GRAD_NORM", "SEQ_LEN"]
__all__ += ["build_model", "make_microbatch", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem


def pair(terms: int, generator) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) of a pair with `terms` terms, at most ROW_TOKENS tokens."""
    if terms == 0:
        return [], []
    longest_prompt = ROW_TOKENS - terms  # the completion and its end of sequence: terms tokens
    prompt = 1 + int(torch.randint(longest_prompt, (1,), generator=generator))
    return random_words(prompt, generator), random_words(terms - 1, generator)


def make_microbatch(n_terms, generator):
    pairs = [pair(t, generator) for t in split(n_terms, BATCH_SIZE, SEQ_LEN, generator)]
    return {
        "prompt": [as_text(p) for p, _ in pairs],
        "completion": [(" " if p else "") + as_text(c) for p, c in pairs],
    } | checked_rows(pairs)


def train_step(model, optimizer, microbatches):
    _train_step(model, optimizer, microbatches, ADAPTER, completion_only_loss=True)
