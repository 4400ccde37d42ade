"""Coupled objectives: what one update optimises when an item's loss depends on other items.

With in-batch negatives or BatchNorm statistics there is no loss per item, only a scalar
L(B_1, ..., B_m) over the microbatches computed together (`batch_loss`). Microbatches are
laid out [rank r][micro_step k] (P ranks x K microsteps). Each parallel scheme optimises a
different pool of items (core.coupled_schemes names the one a trainer really used):

    global_batch     L(B_11, ..., B_1K, B_21, ..., B_PK)       rank-major, then micro_step
    rank_pool        (1/P) sum_r L(B_r1, ..., B_rK)            DDP, no gather / plain BatchNorm
    microbatch_pool  (1/(P K)) sum_rk L(B_rk)                  accumulation without a gather
    microstep_pool   (1/K) sum_k L(B_1k, ..., B_Pk)            accumulation with a gather

With `embed(model, B) -> (queries, documents)` (one row per item, row i of the documents
the positive of query i) and `embedding_loss(model, Q, D)` the gradient path is named too.
Q_r, D_r are rank r's rows over its microsteps, D_~r every other rank's, sg() detaches:

    remote_detached  (1/P) sum_r l(Q_r, [D_r ; sg(D_~r)])      all_gather without its backward
    query_path_only  (1/P) sum_r l(Q_r, sg([D_r ; D_~r]))      no document carries gradient

Rows past len(Q_r) are extra negatives, so `embedding_loss` must accept more documents than
queries (cross_entropy(Q @ D.T / tau, arange(len(Q))) does; a symmetric CLIP loss does not,
and then these two are undefined) unless it says so (`symmetric`, a file's SYMMETRIC): l is
then ONE direction, L = (l(Q, D) + l(D, Q)) / 2, each rank's term (l(Q_r, pool of D) +
l(D_r, pool of Q)) / 2, the path in each direction (OpenCLIP local_loss=True,
gather_with_grad=False: query_path_only). Without `batch_loss`, L(...) is l of the
concatenated rows (`embedding_batch_loss`). GradCache at any P, K is global_batch. At K > 1
the paths score a rank's queries of every micro step at once (a GradCache whose gather
returns no gradient); a gather per micro step with detached remote rows is neither: other.

Design note, for the trainer check's coupled worker (every rank builds every microbatch):
    grads = candidate_gradients(fresh_model, batches, batch_loss=..., embed=..., ...)  # rank 0
    delta = {name: after - before}      # the user's train_step, SGD at lr 1, per parameter
    solved = coupled_schemes.solve_schemes(delta, grads, rtol=SOLVE_RTOL[dtype])
`fresh_model` is build_model's model at the initial weights; with MAX_GRAD_NORM divide delta
by the reference's clip coefficient first. A candidate whose callables raise (a CLIP loss
given more documents than queries) is left out: the solve then cannot name it.

Run: python -c "from pclab.core.coupled_objectives import *; print(NAMED_SCHEMES)"
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from pclab.core import validation as v

POOL_SCHEMES = ("global_batch", "rank_pool", "microbatch_pool", "microstep_pool")
PATH_SCHEMES = ("remote_detached", "query_path_only")
NAMED_SCHEMES = (*POOL_SCHEMES, *PATH_SCHEMES)  # global_batch, the correct one, first

Microbatch = Any  # whatever make_microbatch returns: only the user's callables read it
Layout = tuple[tuple[Microbatch, ...], ...]  # [rank][micro_step]
BatchLoss = Callable[[torch.nn.Module, list[Microbatch]], torch.Tensor]
Embed = Callable[[torch.nn.Module, Microbatch], tuple[torch.Tensor, torch.Tensor]]
EmbeddingLoss = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
Gradient = dict[str, torch.Tensor]  # parameter name -> float64 gradient shaped like it


def layout(microbatches: object) -> Layout:
    """`microbatches` checked as [rank][micro_step]: a non-empty list (or tuple) of equally
    long, non-empty lists; ValueError naming the value otherwise (a flat list of dicts too)."""
    rows = microbatches if isinstance(microbatches, list | tuple) else None
    if not rows or not all(isinstance(row, list | tuple) for row in rows):
        raise v.InvalidInput("microbatches", microbatches, "rectangular", "[rank][micro_step]")
    width = len(rows[0])
    if width == 0 or any(len(row) != width for row in rows):
        raise v.InvalidInput("microbatches", [len(r) for r in rows], "rectangular")
    return tuple(tuple(row) for row in rows)


def identical_objectives(world_size: int, accum_steps: int) -> tuple[tuple[str, ...], ...]:
    """Groups of schemes that are the same objective by construction at P x K (no run can
    tell them apart): at K = 1 microstep_pool is global_batch and microbatch_pool is
    rank_pool; at P = 1 rank_pool and remote_detached are global_batch and microstep_pool is
    microbatch_pool; at P x K = 1 all of these are one.

        >>> identical_objectives(2, 1)
        (('global_batch', 'microstep_pool'), ('rank_pool', 'microbatch_pool'))
    """
    p = v.count(world_size, "world_size", minimum=1)
    k = v.count(accum_steps, "accum_steps", minimum=1)
    if p == 1 and k == 1:
        return ((*POOL_SCHEMES, "remote_detached"),)
    if p == 1:
        return (("global_batch", "rank_pool", "remote_detached"), POOL_SCHEMES[2:])
    if k == 1:
        return (("global_batch", "microstep_pool"), ("rank_pool", "microbatch_pool"))
    return ()


def pools(scheme: str, microbatches: object) -> tuple[list[Microbatch], ...]:
    """The pools `scheme` computes L over, each a list of microbatches in order (the
    objective is their L averaged with equal weight)."""
    scheme = v.choice(scheme, "scheme", POOL_SCHEMES)
    grid = layout(microbatches)
    if scheme == "global_batch":
        return ([b for row in grid for b in row],)
    if scheme == "rank_pool":
        return tuple(list(row) for row in grid)
    if scheme == "microbatch_pool":
        return tuple([b] for row in grid for b in row)
    return tuple([row[k] for row in grid] for k in range(len(grid[0])))


def pool_objective(
    scheme: str, batch_loss: BatchLoss, model: torch.nn.Module, microbatches: object
) -> torch.Tensor:
    """One pool scheme's objective, with its autograd graph:

        J = (1/|pools|) sum over pools of batch_loss(model, pool)     (`pools` lists them)

    Args:
        scheme: one of POOL_SCHEMES.
        batch_loss: (model, list of microbatches) -> a finite 0-d float tensor.
        model: the torch module batch_loss reads.
        microbatches: [rank][micro_step] (see `layout`).
    Returns:
        A 0-d tensor. ValueError names a bad scheme, layout or a non-scalar/non-finite loss.
    """
    parts = [_scalar(batch_loss(model, pool), "batch_loss") for pool in pools(scheme, microbatches)]
    return torch.stack(parts).mean()


def path_objective(
    scheme: str,
    embed: Embed,
    embedding_loss: EmbeddingLoss,
    model: torch.nn.Module,
    microbatches: object,
    symmetric: bool = False,
) -> torch.Tensor:
    """One gradient-path scheme's objective, with its autograd graph:

        remote_detached  J = (1/P) sum_r embedding_loss(model, Q_r, [D_r ; sg(D_~r)])
        query_path_only  J = (1/P) sum_r embedding_loss(model, Q_r, sg([D_r ; D_~r]))

    Args:
        scheme: one of PATH_SCHEMES.
        embed: (model, microbatch) -> (queries, documents), 2-D tensors with a row per item.
        embedding_loss: (model, queries, documents) -> a finite 0-d tensor; the first
            len(queries) documents are the positives, any further rows extra negatives.
        model, microbatches: as for `pool_objective`.
        symmetric: embedding_loss is one direction: each term the mean of it and the same
            term with queries and documents swapped (the path in each direction).
    Returns:
        A 0-d tensor. ValueError names a bad scheme, layout, embedding or loss.
    """
    scheme = v.choice(scheme, "scheme", PATH_SCHEMES)
    symmetric = v.flag(symmetric, "symmetric")
    grid = layout(microbatches)
    rows = [[_embedding(embed(model, b)) for b in row] for row in grid]
    queries = [torch.cat([q for q, _ in row]) for row in rows]
    documents = [torch.cat([d for _, d in row]) for row in rows]

    def term(r: int, own: list[torch.Tensor], other: list[torch.Tensor]) -> torch.Tensor:
        pool = torch.cat([other[r], *[d.detach() for j, d in enumerate(other) if j != r]])
        pool = pool.detach() if scheme == "query_path_only" else pool
        return _scalar(embedding_loss(model, own[r], pool), "embedding_loss")

    parts = [term(r, queries, documents) for r in range(len(grid))]
    if symmetric:
        parts = [(t + term(r, documents, queries)) / 2 for r, t in enumerate(parts)]
    return torch.stack(parts).mean()


def embedding_batch_loss(
    embed: Embed, embedding_loss: EmbeddingLoss, symmetric: bool = False
) -> BatchLoss:
    """batch_loss for a file without one: embedding_loss of the pool's rows (symmetric: both)."""

    def batch_loss(model: torch.nn.Module, microbatches: list[Microbatch]) -> torch.Tensor:
        pairs = [_embedding(embed(model, b)) for b in microbatches]
        queries = torch.cat([q for q, _ in pairs])
        documents = torch.cat([d for _, d in pairs])
        forward = embedding_loss(model, queries, documents)
        if not symmetric:
            return forward
        back = _scalar(embedding_loss(model, documents, queries), "embedding_loss")
        return (_scalar(forward, "embedding_loss") + back) / 2

    return batch_loss


def gradient(objective: torch.Tensor, model: torch.nn.Module) -> Gradient:
    """d objective / d parameter for every named parameter of `model`, as float64 tensors
    (zeros where the objective does not reach a parameter, or it is frozen). The model's
    .grad fields are left untouched (torch.autograd.grad, not backward)."""
    named = list(model.named_parameters())
    trained = [(n, p) for n, p in named if p.requires_grad]
    found: dict[str, torch.Tensor | None] = {}
    if trained and objective.requires_grad:
        grads = torch.autograd.grad(objective, [p for _, p in trained], allow_unused=True)
        found = {n: g for (n, _), g in zip(trained, grads)}
    return {
        n: (g if (g := found.get(n)) is not None else torch.zeros_like(p))
        .detach()
        .to(torch.float64)
        for n, p in named
    }


def candidate_gradient(
    scheme: str,
    model: torch.nn.Module,
    microbatches: object,
    batch_loss: BatchLoss | None = None,
    embed: Embed | None = None,
    embedding_loss: EmbeddingLoss | None = None,
    symmetric: bool = False,
) -> Gradient:
    """The gradient of `scheme`'s objective at the model's weights, per parameter, float64.

    A pool needs batch_loss, or embed and embedding_loss (`embedding_batch_loss`); a path
    needs embed and embedding_loss (symmetric: one direction; a batch_loss is used as given).
    Buffers (BatchNorm's running statistics) and the global random stream are restored
    afterwards: the model leaves as it came. ValueError names a scheme its callables lack.
    """
    scheme = v.choice(scheme, "scheme", NAMED_SCHEMES)
    symmetric = v.flag(symmetric, "symmetric")
    if (embed is None) != (embedding_loss is None):
        missing = "embed" if embed is None else "embedding_loss"
        raise v.InvalidInput(missing, None, "non_empty", "embed and embedding_loss go together")
    if embed is None or embedding_loss is None:
        if scheme in PATH_SCHEMES or batch_loss is None:
            raise v.InvalidInput("scheme", scheme, "one_of", _available(batch_loss, None))
        return _at_start(model, lambda: pool_objective(scheme, batch_loss, model, microbatches))
    if scheme in PATH_SCHEMES:
        return _at_start(
            model,
            lambda: path_objective(scheme, embed, embedding_loss, model, microbatches, symmetric),
        )
    loss = batch_loss or embedding_batch_loss(embed, embedding_loss, symmetric)
    return _at_start(model, lambda: pool_objective(scheme, loss, model, microbatches))


def candidate_gradients(
    model: torch.nn.Module,
    microbatches: object,
    batch_loss: BatchLoss | None = None,
    embed: Embed | None = None,
    embedding_loss: EmbeddingLoss | None = None,
    symmetric: bool = False,
) -> dict[str, Gradient]:
    """Every candidate the callables define (NAMED_SCHEMES order), as `candidate_gradient`.
    A callable's own error propagates: the caller decides whether to drop that candidate."""
    names = POOL_SCHEMES if embed is None else NAMED_SCHEMES
    return {
        s: candidate_gradient(s, model, microbatches, batch_loss, embed, embedding_loss, symmetric)
        for s in names
    }


def _available(batch_loss: BatchLoss | None, embed: Embed | None) -> str:
    have = (POOL_SCHEMES if batch_loss or embed else ()) + (PATH_SCHEMES if embed else ())
    return ", ".join(have) or "none: give batch_loss, or embed and embedding_loss"


def _at_start(model: torch.nn.Module, objective: Callable[[], torch.Tensor]) -> Gradient:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model={model!r} is not a torch module")
    with _restored(model), torch.random.fork_rng(devices=[]):
        return gradient(objective(), model)


@contextmanager
def _restored(model: torch.nn.Module) -> Iterator[None]:
    """Put every buffer back as it was (a forward in train mode moves BatchNorm's)."""
    kept = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in kept:
                buffer.copy_(value)


def _scalar(value: object, field: str) -> torch.Tensor:
    """A user's loss: a finite one-element float tensor (its graph kept), as a 0-d tensor."""
    if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point()):
        got = (value.dtype, tuple(value.shape)) if isinstance(value, torch.Tensor) else value
        raise v.InvalidInput(field, got, "same_shape", "a scalar float tensor")
    if not math.isfinite(float(value.detach())):
        raise v.InvalidInput(field, float(value.detach()), "finite")
    return value.reshape(())


def _embedding(value: object) -> tuple[torch.Tensor, torch.Tensor]:
    pair = tuple(value) if isinstance(value, tuple | list) and len(value) == 2 else (None, None)
    q, d = pair
    if not (isinstance(q, torch.Tensor) and isinstance(d, torch.Tensor)):
        raise v.InvalidInput("embed", type(value).__name__, "same_shape", "(queries, documents)")
    if q.ndim != 2 or d.ndim != 2 or len(q) != len(d):
        shapes = (tuple(q.shape), tuple(d.shape))
        raise v.InvalidInput("embed", shapes, "same_shape", "2-D, one row per item in each")
    return q, d
