"""Blind trainer a: GradCache over every rank and microstep (expected `global_batch`).

Written from the README's coupled contract alone. One shared tanh encoder embeds both sides;
a learnable temperature (`log_scale`). The step embeds every microbatch without grad, gathers
the embeddings of every rank, takes the InfoNCE loss over that one pool, caches the gradient
with respect to each of this rank's embeddings, then re-forwards each microbatch with grad and
pushes the cached gradient through it. Encoder gradients are summed over ranks (each rank
holds its own items' share of one loss); the temperature's is the same on every rank.
"""

import torch
import torch.distributed as dist
from torch.nn import functional as F

DIM_IN = 4
DIM_OUT = 3


class Tower(torch.nn.Module):
    """A tanh encoder shared by queries and documents, and a learnable log temperature."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(DIM_IN, DIM_OUT)
        self.log_scale = torch.nn.Parameter(torch.tensor(0.3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x))


def build_model():
    torch.manual_seed(7)
    return Tower().double()


def make_microbatch(n, generator):
    q = torch.randn(n, DIM_IN, generator=generator, dtype=torch.float64)
    d = q + 0.5 * torch.randn(n, DIM_IN, generator=generator, dtype=torch.float64)
    return {"query": q, "doc": d}


def embed(model, microbatch):
    return model(microbatch["query"]), model(microbatch["doc"])


def embedding_loss(model, queries, documents):
    logits = model.log_scale.exp() * queries @ documents.T
    return F.cross_entropy(logits, torch.arange(len(queries)))


def _gather_rows(local):
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local.contiguous())
    return parts


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    rank, world = dist.get_rank(), dist.get_world_size()
    with torch.no_grad():
        cached = [embed(model, mb) for mb in microbatches]
    sizes = [len(q) for q, _ in cached]
    local_q = torch.cat([q for q, _ in cached])
    local_d = torch.cat([d for _, d in cached])
    all_q = _gather_rows(local_q)
    all_d = _gather_rows(local_d)
    all_q[rank] = local_q.clone().requires_grad_(True)
    all_d[rank] = local_d.clone().requires_grad_(True)
    loss = embedding_loss(model, torch.cat(all_q), torch.cat(all_d))
    loss.backward()  # log_scale's gradient, and the cache for this rank's rows
    grad_q = all_q[rank].grad.split(sizes)
    grad_d = all_d[rank].grad.split(sizes)
    for mb, gq, gd in zip(microbatches, grad_q, grad_d):
        q, d = embed(model, mb)
        ((q * gq).sum() + (d * gd).sum()).backward()
    for p in model.proj.parameters():
        dist.all_reduce(p.grad)  # each rank holds its own rows' share: sum them
    dist.all_reduce(model.log_scale.grad)
    model.log_scale.grad /= world  # the same full-loss gradient on every rank
    optimizer.step()
