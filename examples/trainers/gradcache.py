"""Correct at any P and K: GradCache. The embeddings of every microbatch are computed once
without a graph, gathered from every rank, and the loss over the whole global batch is taken
on them (every query against every document of every rank and microstep); its gradient with
respect to each embedding is then pushed back through the encoder one microbatch at a time.
Accumulation enlarges the pool here, as it never does with a loss per microbatch."""

import torch
import torch.distributed as dist
from tiny_embedder import build_model, embed, embedding_loss, make_microbatch

__all__ = ["build_model", "embed", "embedding_loss", "make_microbatch", "train_step"]


def train_step(model, optimizer, microbatches):
    optimizer.zero_grad()
    with torch.no_grad():  # 1. every embedding, no graph kept
        cached = [embed(model, mb) for mb in microbatches]
    world = dist.get_world_size()
    rows = []  # 2. every rank's rows, rank-major then microstep (sizes equal per microstep)
    for side in (0, 1):
        per_step = []
        for q_or_d in (c[side] for c in cached):
            parts = [torch.empty_like(q_or_d) for _ in range(world)]
            dist.all_gather(parts, q_or_d.contiguous())
            per_step.append(parts)
        rows.append([per_step[k][r] for r in range(world) for k in range(len(cached))])
    queries = torch.cat(rows[0]).requires_grad_()
    documents = torch.cat(rows[1]).requires_grad_()
    loss = embedding_loss(model, queries, documents)  # 3. the global batch's loss
    loss.backward()  # gradients of the embeddings, and of the temperature (same on each rank)
    sizes = [len(c[0]) for c in cached]
    start = dist.get_rank() * sum(sizes)
    for mb, n in zip(microbatches, sizes):  # 4. this rank's rows, through the encoder again
        q, d = embed(model, mb)
        own = slice(start, start + n)
        torch.autograd.backward((q, d), (queries.grad[own], documents.grad[own]))
        start += n
    for name, p in model.named_parameters():
        if name != "logit_scale":  # the encoder's share is spread over the ranks: sum it
            dist.all_reduce(p.grad)
    optimizer.step()
