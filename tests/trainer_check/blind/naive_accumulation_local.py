"""Blind trainer b: accumulation, each microbatch its own in-batch negatives (expected
`microbatch_pool`).

Two towers (a query MLP and a document linear map), a fixed temperature. `batch_loss` only:
the one-process objective is InfoNCE over every item handed in. The step averages each
microbatch's own loss over the K microsteps and the ranks' gradients over P, by hand.
"""

import torch
import torch.distributed as dist
from torch.nn import functional as F

TEMPERATURE = 0.5


def build_model():
    torch.manual_seed(3)
    model = torch.nn.ModuleDict(
        {
            "query_tower": torch.nn.Sequential(
                torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)
            ),
            "doc_tower": torch.nn.Linear(5, 3, bias=False),
        }
    )
    return model.to(torch.float64)


def make_microbatch(n, generator):
    anchors = torch.randn(n, 5, generator=generator, dtype=torch.float64)
    positives = anchors.flip(1) + 0.3 * torch.randn(n, 5, generator=generator, dtype=torch.float64)
    return {"anchors": anchors, "positives": positives}


def batch_loss(model, microbatches):
    anchors = torch.cat([mb["anchors"] for mb in microbatches])
    positives = torch.cat([mb["positives"] for mb in microbatches])
    scores = model["query_tower"](anchors) @ model["doc_tower"](positives).T / TEMPERATURE
    return F.cross_entropy(scores, torch.arange(len(anchors)))


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    for mb in microbatches:
        (batch_loss(model, [mb]) / len(microbatches)).backward()
    world = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    optimizer.step()
