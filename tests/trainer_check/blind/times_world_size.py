"""Blind trainer f: × P compensation on a gradient-carrying gather (expected `scaled`,
factor P on every parameter).

A bilinear scorer: queries through `w_q`, documents through `w_d`, a learnable temperature
`tau` (the logits are divided by it). Each rank embeds its K microbatches at once, gathers the
documents with `torch.distributed.nn.functional.all_gather` (gradient goes home), and, as
some codebases do "to undo DDP's mean", multiplies its loss by the world size.
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch.nn import functional as F


class Bilinear(torch.nn.Module):
    """Separate query and document projections, and a learnable temperature."""

    def __init__(self) -> None:
        super().__init__()
        self.w_q = torch.nn.Linear(3, 3, bias=False)
        self.w_d = torch.nn.Linear(3, 3)
        self.tau = torch.nn.Parameter(torch.tensor(0.7))


def build_model():
    torch.manual_seed(13)
    return Bilinear().double()


def make_microbatch(n, generator):
    q = torch.randn(n, 3, generator=generator, dtype=torch.float64)
    return {"q": q, "d": -q + 0.5 * torch.randn(n, 3, generator=generator, dtype=torch.float64)}


def embed(model, microbatch):
    return model.w_q(microbatch["q"]), model.w_d(microbatch["d"])


def embedding_loss(model, queries, documents):
    return F.cross_entropy(queries @ documents.T / model.tau, torch.arange(len(queries)))


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    rank, world = dist.get_rank(), dist.get_world_size()
    queries = torch.cat([model.w_q(mb["q"]) for mb in microbatches])
    documents = torch.cat([model.w_d(mb["d"]) for mb in microbatches])
    every = list(dist_fn.all_gather(documents))
    pool = torch.cat([every[rank], *every[:rank], *every[rank + 1 :]])
    loss = embedding_loss(model, queries, pool) * world  # the "compensation"
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    optimizer.step()
