"""Wrong at K > 1: accumulation with a gradient-carrying gather per microbatch. Each
microstep's pool holds every rank's items of that microstep, never the other microsteps':
accumulation does not enlarge the pool (sentence-transformers #2916); GradCache does."""

import torch
import torch.distributed as dist
from tiny_embedder import (
    average_gradients,
    build_model,
    embed,
    embedding_loss,
    gather_with_grad,
    make_microbatch,
)

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    for mb in microbatches:
        queries, documents = embed(model, mb)
        every = gather_with_grad(documents)
        positives = torch.arange(len(queries)) + dist.get_rank() * len(queries)
        logits = queries @ every.T * model.logit_scale.exp()
        loss = torch.nn.functional.cross_entropy(logits, positives)
        (loss / len(microbatches)).backward()
    average_gradients(model)
    optimizer.step()
