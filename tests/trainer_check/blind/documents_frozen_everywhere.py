"""Blind trainer e: no document carries gradient, own rank's included (expected
`query_path_only`).

Items are token ids: a query is one id looked up in an embedding table, a document is an id
looked up in the same table and passed through a linear head; a learnable inverse
temperature. Each rank embeds its K microbatches at once, gathers the documents with plain
`dist.all_gather` and does not put its own back (OpenCLIP's `local_loss=True,
gather_with_grad=False`), so only the query path gets gradient.
"""

import torch
import torch.distributed as dist
from torch.nn import functional as F

VOCAB = 17


class IdEncoder(torch.nn.Module):
    """Shared id table; documents get an extra linear head; `inv_tau` is learnt."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(VOCAB, 3)
        self.doc_head = torch.nn.Linear(3, 3)
        self.inv_tau = torch.nn.Parameter(torch.tensor(2.0))


def build_model():
    torch.manual_seed(2)
    return IdEncoder().to(torch.float64)


def make_microbatch(n, generator):
    query_ids = torch.randint(0, VOCAB, (n,), generator=generator)
    doc_ids = (query_ids + torch.randint(0, 3, (n,), generator=generator)) % VOCAB
    return {"query_ids": query_ids, "doc_ids": doc_ids}


def embed(model, microbatch):
    return model.table(microbatch["query_ids"]), model.doc_head(model.table(microbatch["doc_ids"]))


def embedding_loss(model, queries, documents):
    return F.cross_entropy(model.inv_tau * queries @ documents.T, torch.arange(len(queries)))


def batch_loss(model, microbatches):
    pairs = [embed(model, mb) for mb in microbatches]
    return embedding_loss(model, torch.cat([q for q, _ in pairs]), torch.cat([d for _, d in pairs]))


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    rank, world = dist.get_rank(), dist.get_world_size()
    pairs = [embed(model, mb) for mb in microbatches]
    queries = torch.cat([q for q, _ in pairs])
    documents = torch.cat([d for _, d in pairs])
    gathered = [torch.empty_like(documents) for _ in range(world)]
    dist.all_gather(gathered, documents.detach())
    pool = torch.cat([gathered[rank]] + [g for i, g in enumerate(gathered) if i != rank])
    embedding_loss(model, queries, pool).backward()
    for p in model.parameters():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
        p.grad /= world
    optimizer.step()
