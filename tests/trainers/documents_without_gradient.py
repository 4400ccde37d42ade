"""Wrong (a test file, written against the coupled contract alone): every document is
detached before the loss, the rank's own included, as OpenCLIP's local_loss=True with a
gather that carries no gradient: only the query path trains (query_path_only)."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "trainers"))
from tiny_embedder import (  # noqa: E402  # noqa: E402, F401
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
    queries, documents = rank_rows(model, microbatches)
    gathered = gather_detached(documents)  # values only: the own rows lose their path too
    gathered.insert(0, gathered.pop(dist.get_rank()))  # own rows first: the positives
    embedding_loss(model, queries, torch.cat(gathered)).backward()
    average_gradients(model)
    optimizer.step()
