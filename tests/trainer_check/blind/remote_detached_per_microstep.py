"""Blind trainer d2: remote documents detached, gathered at each accumulation microstep.

The same objective shape as `remote_documents_detached.py` (plain `dist.all_gather`, own
documents put back with their graph, own queries against every rank's documents), but the
way most accumulation loops are written: one gather per microstep, each loss ÷ K. The
contract's `remote_detached` names "each rank's loss over its own queries"; whether that
pool is the rank's K microbatches or one microstep is what this file asks the check.
"""

import torch
import torch.distributed as dist

# the same model, items and loss as its neighbour (the check puts this folder on sys.path)
from remote_documents_detached import build_model, embed, embedding_loss, make_microbatch

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    rank, world = dist.get_rank(), dist.get_world_size()
    for mb in microbatches:
        queries, documents = embed(model, mb)
        slots = [torch.zeros_like(documents) for _ in range(world)]
        dist.all_gather(slots, documents.detach())
        others = [s for i, s in enumerate(slots) if i != rank]
        loss = embedding_loss(model, queries, torch.cat([documents, *others]))
        (loss / len(microbatches)).backward()
    for weight in model.parameters():
        dist.all_reduce(weight.grad)
        weight.grad.div_(world)
    optimizer.step()
