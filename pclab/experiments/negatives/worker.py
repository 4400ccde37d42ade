"""One rank of the negatives experiment: every scheme of gathering documents, then DDP + SGD.

torchrun --standalone --nproc-per-node 4 -m pclab.experiments.negatives --out-dir /tmp/neg
"""

from __future__ import annotations

import warnings

from pclab.experiments.base import rank_main
from pclab.experiments.negatives.params import LR, Params, default_pairs
from pclab.runners.worker import worker_device

SCHEMES = ("gather", "detach", "local", "full_loss_each_rank")


def _query_loss(q, docs, tau: float, positive: int):
    """Un-divided InfoNCE loss of one query against its candidate documents."""
    import torch

    logits = q * docs / tau
    return torch.logsumexp(logits, dim=0) - logits[positive]


def _gathered(x, world_size: int) -> list:
    """Every rank's value of x, detached (a plain all_gather carries no gradient)."""
    import torch
    import torch.distributed as dist

    out = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(out, x.detach().contiguous())
    return out


def _scheme_loss(scheme: str, q, d, rank: int, world_size: int, tau: float):
    import torch
    import torch.distributed.nn.functional as dist_nn

    if scheme == "gather":
        # The autograd-aware all-gather: its backward sums every rank's part into the owner.
        # (torch 2.13 flags it deprecated in favour of a functional collective; it is the
        # one open_clip-style code uses, so the lab runs it and mutes the notice.)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            gathered = dist_nn.all_gather(d)
        docs = torch.cat(gathered)
        return _query_loss(q, docs, tau, rank)
    if scheme == "detach":
        docs = _gathered(d, world_size)
        docs[rank] = d  # only the rank's own document keeps its graph
        return _query_loss(q, torch.cat(docs), tau, rank)
    if scheme == "local":
        return _query_loss(q, d, tau, 0)
    queries, docs = _gathered(q, world_size), _gathered(d, world_size)
    queries[rank], docs[rank] = q, d  # open_clip / GradCache: own features re-inserted
    logits = torch.cat(queries)[:, None] * torch.cat(docs)[None, :] / tau
    return (torch.logsumexp(logits, dim=1) - torch.diagonal(logits)).mean()


def _reference(a, b, wq: float, wd: float, tau: float, lr: float) -> dict:
    """Single process, whole batch, plain autograd: the objective's own gradient."""
    import torch
    import torch.nn.functional as F

    w_q = torch.tensor(wq, requires_grad=True)
    w_d = torch.tensor(wd, requires_grad=True)
    logits = (w_q * torch.tensor(a))[:, None] * (w_d * torch.tensor(b))[None, :] / tau
    loss = F.cross_entropy(logits, torch.arange(len(a)))  # mean over queries of -log p_ii
    loss.backward()
    return {
        "loss": loss.item(),
        "grad_wq": w_q.grad.item(),
        "grad_wd": w_d.grad.item(),
        "params_after_sgd": {"wq": wq - lr * w_q.grad.item(), "wd": wd - lr * w_d.grad.item()},
    }


def _run_scheme(scheme: str, a_r: float, b_r: float, params, rank: int, world_size: int) -> dict:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    device = worker_device()

    class Encoders(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wq = torch.nn.Parameter(torch.tensor(params.wq))
            self.wd = torch.nn.Parameter(torch.tensor(params.wd))

        def forward(self, a, b):
            return self.wq * a, self.wd * b

    model = Encoders().to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    inputs = (torch.tensor([a_r], device=device), torch.tensor([b_r], device=device))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    with ddp.no_sync():  # this rank's own gradient, before DDP averages it
        q, d = ddp(*inputs)
        _scheme_loss(scheme, q, d, rank, world_size, params.tau).backward()
    grad_local = (model.wq.grad.item(), model.wd.grad.item())
    optimizer.zero_grad(set_to_none=True)

    q, d = ddp(*inputs)
    loss = _scheme_loss(scheme, q, d, rank, world_size, params.tau)
    loss.backward()  # DDP all-reduces and averages the gradient here
    grad = (model.wq.grad.item(), model.wd.grad.item())
    optimizer.step()
    return {
        "local_loss": loss.item(),
        "grad_wq_local": grad_local[0],
        "grad_wd_local": grad_local[1],
        "grad_wq": grad[0],
        "grad_wd": grad[1],
        "params_after_sgd": {"wq": model.wq.item(), "wd": model.wd.item()},
    }


def compute(params: Params, rank: int, world_size: int) -> dict:
    """One pair per rank, every scheme, and (every rank) the single-process reference."""
    a, b = default_pairs(world_size)
    return {
        "a": a,
        "b": b,
        "tau": params.tau,
        "wq": params.wq,
        "wd": params.wd,
        "lr": LR,
        "schemes": {s: _run_scheme(s, a[rank], b[rank], params, rank, world_size) for s in SCHEMES},
        "reference": _reference(a, b, params.wq, params.wd, params.tau, LR),
    }


def main(argv: list[str] | None = None) -> None:
    """torchrun entry point: rank<RANK>.json in --out-dir (experiments.base.rank_main)."""
    rank_main(Params, compute, argv)
