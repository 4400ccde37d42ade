"""Correct across a run, for a contrastive loss: every window of accum_steps microbatches (the
epoch's last one a shorter tail) is ONE GradCache update (gradcache.py's train_step): the
embeddings of the window's microbatches on every rank pooled into one loss, so each query
meets every document of its window, whatever the window's length. One scheduler step per
update; the schedule is built for the true number of updates."""

import torch
from gradcache import train_step
from tiny_embedder import build_model, embed, embedding_loss, make_microbatch

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "make_optimizer"]
__all__ += ["make_scheduler", "train_loop"]


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)


def make_scheduler(optimizer, num_updates):
    """The rate falls linearly towards 0 over the run (never reaching it)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / (num_updates + 1))


def train_loop(model, optimizer, epochs, accum_steps):
    updates = sum(-(-len(epoch) // accum_steps) for epoch in epochs)  # tails count
    scheduler = make_scheduler(optimizer, updates)
    for epoch in epochs:
        for start in range(0, len(epoch), accum_steps):
            train_step(model, optimizer, epoch[start : start + accum_steps])  # one pool
            scheduler.step()
