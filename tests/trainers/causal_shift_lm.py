"""A causal LM's loss (position t predicts the label at t + 1, so a label at position 0 is
never a term), normalised right: the global count of terms after the shift. With
`--counts-labels` the check places labels anywhere, position 0 too, and a microbatch whose
labels all sit there holds no terms: the check must say so (counts_not_terms). With
`--counts` (terms) every label it places is a term."""

import _examples  # noqa: F401
import torch
import torch.distributed as dist
from tiny_lm import BATCH_SIZE, IGNORE, SEQ_LEN, VOCAB_SIZE, build_model
from torch.nn import functional as F

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]


def token_losses(model, microbatch):
    logits = model(microbatch["input_ids"])[:, :-1]  # position t predicts label t + 1
    labels = microbatch["labels"][:, 1:]
    counted = labels != IGNORE
    return F.cross_entropy(logits[counted], labels[counted], reduction="none")


def train_step(model, optimizer, microbatches):
    terms = sum(int((mb["labels"][:, 1:] != IGNORE).sum()) for mb in microbatches)
    n = torch.tensor(float(terms))
    dist.all_reduce(n)
    if n.item() == 0:
        return
    optimizer.zero_grad()
    for microbatch in microbatches:
        (token_losses(model, microbatch).sum() / n).backward()
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
    optimizer.step()
