"""The small model every bundled example trains: an embedding, tanh, and a linear read-out
over an 11-token vocabulary (187 float64 parameters). The examples differ only in
train_step; this is what the trainer check needs besides it.

A trainer file may import its neighbours, as this one is imported by each example.
"""

import torch
from torch.nn import functional as F

VOCAB_SIZE = 11
SEQ_LEN = 8  # positions per sequence
BATCH_SIZE = 2  # sequences per microbatch
IGNORE = -100  # a label that does not count


def build_model() -> torch.nn.Module:
    """A fresh model, identical on every call (fixed seed), float64 on the CPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB_SIZE, 8), torch.nn.Tanh(), torch.nn.Linear(8, VOCAB_SIZE)
    )
    return model.double()


def token_losses(model, microbatch) -> torch.Tensor:
    """One cross-entropy term per counted label of the microbatch (the objective's terms)."""
    logits = model(microbatch["input_ids"])
    labels = microbatch["labels"]
    counted = labels != IGNORE
    return F.cross_entropy(logits[counted], labels[counted], reduction="none")


def count_labels(microbatches) -> int:
    """How many labels count on this rank, over its microbatches."""
    return sum(int((mb["labels"] != IGNORE).sum()) for mb in microbatches)
