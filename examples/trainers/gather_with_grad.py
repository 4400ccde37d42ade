"""Correct: each rank scores its own queries against every rank's documents, gathered with a
gather whose backward returns each document's gradient to its owner, and the gradients are
averaged over the ranks (DDP's mean). Meant for K = 1: it takes the step's microbatches as
one (with K > 1 it would hold every microbatch's graph at once; GradCache accumulates, and
a gather per microbatch pools one microstep at a time: naive_accumulation_gather.py)."""

import torch
import torch.distributed as dist
from tiny_embedder import (  # noqa: F401
    average_gradients,
    build_model,
    embed,
    embedding_loss,
    gather_with_grad,
    make_microbatch,
    rank_rows,
)

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def gathered_loss(model, microbatches):
    """This rank's queries against every rank's documents (rank-major), the gradient of the
    remote ones going back to their owners."""
    queries, documents = rank_rows(model, microbatches)
    every = gather_with_grad(documents)
    positives = torch.arange(len(queries)) + dist.get_rank() * len(queries)
    logits = queries @ every.T * model.logit_scale.exp()
    return torch.nn.functional.cross_entropy(logits, positives)


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    gathered_loss(model, microbatches).backward()
    average_gradients(model)
    optimizer.step()
