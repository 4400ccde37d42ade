"""The small embedding model the coupled examples train (issue 28's contract): one tanh
encoder shared by queries and documents and a learnable temperature, 16 float64 parameters.
The examples differ only in train_step; this is what the coupled check needs besides it.

    batch_loss is left out: the check takes embedding_loss of the concatenated embeddings.
"""

import torch
import torch.distributed as dist
from torch.nn import functional as F

FEATURES, WIDTH = 4, 3


def build_model() -> torch.nn.Module:
    """A fresh model, identical on every call (fixed seed), float64 on the CPU."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.encoder = torch.nn.Linear(FEATURES, WIDTH)  # queries and documents alike
    model.logit_scale = torch.nn.Parameter(torch.tensor(0.5))  # logits x exp(logit_scale)
    return model.double()


def make_microbatch(n, generator):
    """n (query, document) pairs, each document near its query."""
    queries = torch.randn(n, FEATURES, generator=generator, dtype=torch.float64)
    noise = torch.randn(n, FEATURES, generator=generator, dtype=torch.float64)
    return {"queries": queries, "documents": queries + 0.5 * noise}


def embed(model, microbatch):
    """(queries, documents): one row per pair, document i the positive of query i."""
    encode = lambda x: torch.tanh(model.encoder(x))  # noqa: E731
    return encode(microbatch["queries"]), encode(microbatch["documents"])


def rank_rows(model, microbatches):
    """(queries, documents) of this rank's microbatches, concatenated in microstep order."""
    pairs = [embed(model, mb) for mb in microbatches]
    return torch.cat([q for q, _ in pairs]), torch.cat([d for _, d in pairs])


def embedding_loss(model, queries, documents):
    """InfoNCE: query i against every document given, its positive the i-th; rows past
    len(queries) are extra negatives."""
    logits = queries @ documents.T * model.logit_scale.exp()
    return F.cross_entropy(logits, torch.arange(len(queries)))


class GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward sends each rank the gradient of its own rows, summed over
    every rank's loss (the gather pages 05 and 06 prove right)."""

    @staticmethod
    def forward(ctx, rows):
        gathered = [torch.empty_like(rows) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, rows.contiguous())
        return tuple(gathered)

    @staticmethod
    def backward(ctx, *grads):
        summed = torch.stack(grads)
        dist.all_reduce(summed)
        return summed[dist.get_rank()]


def gather_with_grad(rows):
    """Every rank's rows, rank-major, carrying gradient back to their owners."""
    return torch.cat(GatherWithGrad.apply(rows))


def gather_detached(rows):
    """Every rank's rows, rank-major, as values only (no gradient flows back)."""
    gathered = [torch.empty_like(rows) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, rows.detach().contiguous())
    return gathered


def average_gradients(model):
    """DDP's mean: every parameter's gradient summed over the ranks, over P."""
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
