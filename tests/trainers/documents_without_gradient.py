"""Wrong (a test file, written against the coupled contract alone): every document is
detached before the loss, the rank's own included, as OpenCLIP's local_loss=True with a
gather that carries no gradient: only the query path trains (query_path_only)."""

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
)

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    pairs = [embed(model, mb) for mb in microbatches]
    queries = torch.cat([q for q, _ in pairs])
    gathered = gather_detached(torch.cat([d for _, d in pairs]))
    own = gathered[dist.get_rank()]
    others = [d for r, d in enumerate(gathered) if r != dist.get_rank()]
    embedding_loss(model, queries, torch.cat([own, *others])).backward()
    average_gradients(model)
    optimizer.step()
