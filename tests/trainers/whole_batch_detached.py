"""Wrong by a factor per group (a test file, written against the coupled contract alone):
OpenCLIP's local_loss=False, gather_with_grad=False. Every rank takes the whole batch's
loss, every rank's rows gathered as values with its own rows put back with their graph, and
DDP averages: the encoder gets the global gradient / P (each rank's rows only reach it
once), the temperature the global gradient x 1 (every rank has all of it)."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "trainers"))
from tiny_embedder import (  # noqa: E402
    average_gradients,
    build_model,
    embed,
    embedding_loss,
    gather_detached,
    make_microbatch,
    rank_rows,
)

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    rows = rank_rows(model, microbatches)
    every = []
    for own in rows:  # queries, then documents: rank-major, this rank's slot with its graph
        gathered = gather_detached(own)
        gathered[dist.get_rank()] = own
        every.append(torch.cat(gathered))
    embedding_loss(model, *every).backward()
    average_gradients(model)
    optimizer.step()
