"""Blind trainer d: remote documents detached (expected `remote_detached`).

Cosine-similarity InfoNCE, fixed temperature 0.2, one linear encoder without bias. Each rank
embeds all its items at once (its K microbatches concatenated), gathers the documents with
plain `dist.all_gather` (no backward), puts its own documents back with their graph, and
scores its own queries against every rank's documents. The gradients are averaged over ranks.
"""

import torch
import torch.distributed as dist
from torch.nn import functional as F

TAU = 0.2


def build_model():
    torch.manual_seed(5)
    return torch.nn.Linear(4, 4, bias=False).double()


def make_microbatch(n, generator):
    left = torch.randn(n, 4, generator=generator, dtype=torch.float64)
    right = left.roll(1, dims=1) + 0.4 * torch.randn(n, 4, generator=generator, dtype=torch.float64)
    return {"left": left, "right": right}


def embed(model, microbatch):
    return (
        F.normalize(model(microbatch["left"]), dim=-1),
        F.normalize(model(microbatch["right"]), dim=-1),
    )


def embedding_loss(model, queries, documents):
    similarity = queries @ documents.T / TAU
    return F.cross_entropy(similarity, torch.arange(len(queries)))


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    rank, world = dist.get_rank(), dist.get_world_size()
    merged = {key: torch.cat([mb[key] for mb in microbatches]) for key in ("left", "right")}
    queries, documents = embed(model, merged)
    slots = [torch.zeros_like(documents) for _ in range(world)]
    dist.all_gather(slots, documents.detach())
    slots[rank] = documents  # own rows keep their gradient; the others' have none
    others = [s for i, s in enumerate(slots) if i != rank]
    embedding_loss(model, queries, torch.cat([documents, *others])).backward()
    for weight in model.parameters():
        dist.all_reduce(weight.grad)
        weight.grad.div_(world)
    optimizer.step()
