"""Blind trainer f2 (beyond the brief's list): OpenCLIP's `local_loss=False,
gather_with_grad=False` with a document-side bias (expected `scaled`: encoder ÷ P,
temperature × 1, by the README's `scaled` row).

Every rank gathers every rank's queries and documents with plain `dist.all_gather`, puts its
own rows back with their graph, and takes the InfoNCE loss over the whole batch; the ranks'
gradients are averaged. The document projection has a bias, which InfoNCE cannot see (q·b
is the same for every document of a query): its gradient is zero under every objective.
"""

import torch
import torch.distributed as dist
from torch.nn import functional as F


class DualEncoder(torch.nn.Module):
    """Query and document projections (the document one with a bias), a learnable tau."""

    def __init__(self) -> None:
        super().__init__()
        self.query_proj = torch.nn.Linear(4, 3, bias=False)
        self.doc_proj = torch.nn.Linear(4, 3)
        self.tau = torch.nn.Parameter(torch.tensor(0.6))


def build_model():
    torch.manual_seed(21)
    return DualEncoder().double()


def make_microbatch(n, generator):
    q = torch.randn(n, 4, generator=generator, dtype=torch.float64)
    return {
        "q": q,
        "d": q.tanh() + 0.3 * torch.randn(n, 4, generator=generator, dtype=torch.float64),
    }


def embed(model, microbatch):
    return model.query_proj(microbatch["q"]), model.doc_proj(microbatch["d"])


def embedding_loss(model, queries, documents):
    return F.cross_entropy(queries @ documents.T / model.tau, torch.arange(len(queries)))


def _gather(local):
    rows = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, local.detach())
    rows[dist.get_rank()] = local
    return torch.cat(rows)


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    merged = {k: torch.cat([mb[k] for mb in microbatches]) for k in ("q", "d")}
    queries, documents = embed(model, merged)
    embedding_loss(model, _gather(queries), _gather(documents)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()
