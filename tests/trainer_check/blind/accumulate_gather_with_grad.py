"""Blind trainer c: accumulation with a gradient-carrying gather at each microstep (expected
`microstep_pool`).

A two-layer encoder with a learnable logit scale. At each microstep every rank gathers the
documents of every rank with `torch.distributed.nn.functional.all_gather` (its backward sends
each rank's share home), scores its own queries against them, divides by K and backwards;
after the K microsteps the gradients are averaged over ranks by hand.
"""

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch.nn import functional as F


class Encoder(torch.nn.Module):
    """Two layers, a SiLU between them; `logit_scale` multiplies the similarities."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(3, 6), torch.nn.SiLU(), torch.nn.Linear(6, 2)
        )
        self.logit_scale = torch.nn.Parameter(torch.tensor(1.7))

    def forward(self, x):
        return self.layers(x)


def build_model():
    torch.manual_seed(11)
    return Encoder().double()


def make_microbatch(n, generator):
    text = torch.randn(n, 3, generator=generator, dtype=torch.float64)
    image = 0.8 * text + 0.6 * torch.randn(n, 3, generator=generator, dtype=torch.float64)
    return {"text": text, "image": image}


def embed(model, microbatch):
    return model(microbatch["text"]), model(microbatch["image"])


def embedding_loss(model, queries, documents):
    logits = model.logit_scale * (queries @ documents.T)
    return F.cross_entropy(logits, torch.arange(len(queries)))


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    rank = dist.get_rank()
    for mb in microbatches:
        queries, documents = embed(model, mb)
        gathered = list(dist_fn.all_gather(documents))
        # own documents first: document i is the positive of query i, the rest negatives
        ordered = [gathered[rank]] + gathered[:rank] + gathered[rank + 1 :]
        loss = embedding_loss(model, queries, torch.cat(ordered))
        (loss / len(microbatches)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    optimizer.step()
