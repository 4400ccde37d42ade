"""One rank of the clipping experiment: the four-step protocol, clip_grad_norm_ and FSDP2.

    torchrun --standalone --nproc-per-node 2 -m pclab.experiments.clipping --out-dir /tmp/clip \
        --inject-overflow 1
"""

from __future__ import annotations

import math

from pclab.core import clipping
from pclab.experiments.base import rank_main
from pclab.experiments.clipping.params import (
    LR,
    MAX_NORM,
    MOMENTUM,
    SCALE,
    Params,
    scenario_grads,
)


def json_number(x: float) -> float | str:
    """JSON has no inf / nan: those travel as the strings "inf", "-inf", "nan"."""
    return x if math.isfinite(x) else str(x)


def _protocol(held: dict[str, float], owners: dict[str, int], rank: int) -> dict:
    """The four steps on this rank, with plain tensors and three all_reduce calls."""
    import torch
    import torch.distributed as dist

    params = {j: torch.nn.Parameter(torch.tensor(1.0)) for j in held}
    for j, p in params.items():
        p.grad = torch.tensor(held[j])
    optimizer = torch.optim.SGD(params.values(), lr=LR, momentum=MOMENTUM)
    for p in params.values():  # 01 unscale
        p.grad.div_(SCALE)
    grads = torch.stack([p.grad for p in params.values()])
    nonfinite = not bool(torch.isfinite(grads).all())
    owned = torch.stack([params[j].grad for j in held if owners[j] == rank] or [torch.tensor(0.0)])
    agree = torch.tensor([float(nonfinite), 0.0 if nonfinite else owned.abs().max().item()])
    dist.all_reduce(agree, op=dist.ReduceOp.MAX)  # 02 agree
    skip, m = bool(agree[0].item() > 0), agree[1].item()
    squares = torch.zeros(()) if skip or m == 0 else ((owned / m) ** 2).sum()
    dist.all_reduce(squares, op=dist.ReduceOp.SUM)  # 03 reduce
    norm = None if skip else m * math.sqrt(squares.item())
    coefficient = None if norm is None else (1.0 if norm == 0 else min(1.0, MAX_NORM / norm))
    mine = torch.tensor([float(skip), coefficient or 0.0, -(coefficient or 0.0)])
    decision = mine.clone()
    dist.all_reduce(decision, op=dist.ReduceOp.MAX)  # the shared decision, checked
    steps = 0
    if not skip:  # 04 update
        for p in params.values():
            p.grad.mul_(coefficient)
        optimizer.step()
        steps = 1
    buffers = {
        j: optimizer.state[p]["momentum_buffer"].item()
        for j, p in params.items()
        if optimizer.state[p]
    }
    return {
        "nonfinite_local": nonfinite,
        "skip": skip,
        "norm": norm,
        "coefficient": coefficient,
        "decision_agreed": bool(torch.equal(mine, decision)),
        "params": {j: p.item() for j, p in params.items()},
        "momentum_buffers": buffers,
        "successful_steps": steps,
    }


def _synchronised(rank_grads, owners) -> dict[str, float]:
    """Each id once: the owner's value, or a non-finite copy if any rank holds one."""
    out = {}
    for j, r in owners.items():
        copies = [g[j] for g in rank_grads if j in g]
        out[j] = next((x for x in copies if not math.isfinite(x)), rank_grads[r][j])
    return out


def _reference(rank_grads, owners) -> dict:
    """One process, every independent parameter once: GradScaler + clip_grad_norm_ + SGD."""
    import torch

    ids = list(owners)
    target = torch.tensor([_synchronised(rank_grads, owners)[j] / SCALE for j in ids])
    theta = torch.nn.Parameter(torch.ones(len(ids)))
    optimizer = torch.optim.SGD([theta], lr=LR, momentum=MOMENTUM)
    steps = []
    optimizer.register_step_post_hook(lambda *_: steps.append(1))
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE)
    scaler.scale((theta * target).sum()).backward()  # d/dtheta = scale * g
    scaler.unscale_(optimizer)
    unclipped = theta.grad.clone()
    norm = torch.nn.utils.clip_grad_norm_([theta], MAX_NORM, error_if_nonfinite=False).item()
    big = int(unclipped.abs().argmax())
    finite = math.isfinite(norm)
    coefficient = (
        (theta.grad[big] / unclipped[big]).item() if finite and unclipped[big] != 0 else None
    )
    scaler.step(optimizer)
    scaler.update()
    state = optimizer.state[theta]
    return {
        "skip": not steps,
        "norm": json_number(norm),
        "coefficient": coefficient if finite else None,
        "params": dict(zip(ids, theta.detach().tolist(), strict=True)),
        "momentum_buffers": dict(zip(ids, state["momentum_buffer"].tolist(), strict=True))
        if state
        else {},
        "successful_steps": len(steps),
        "scaler_scale_after": scaler.get_scale(),
    }


def _fsdp2(held: dict[str, float], owners: dict[str, int], rank_holders: dict[str, int]) -> dict:
    """The same update on a model sharded with FSDP2 over the CPU Gloo mesh."""
    import torch
    import torch.distributed as dist

    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor
    except ImportError as exc:
        return {"supported": False, "reason": f"not supported on this torch/backend: {exc}"}
    world = dist.get_world_size()
    ids = list(owners)
    # FSDP2 averages the ranks' gradients: each holder contributes world / holders of its copy.
    contrib = torch.tensor([world / rank_holders[j] * held[j] if j in held else 0.0 for j in ids])

    class Flat(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.theta = torch.nn.Parameter(torch.ones(len(ids)))

        def forward(self, weights):
            return (self.theta * weights).sum()

    model = Flat()
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    steps = []
    optimizer.register_step_post_hook(lambda *_: steps.append(1))
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE)
    scaler.scale(model(contrib / SCALE)).backward()  # reduce-scatter of scale * g
    local_grad = model.theta.grad.to_local().tolist()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM, error_if_nonfinite=False)
    norm = (norm.full_tensor() if isinstance(norm, DTensor) else norm).item()
    scaler.step(optimizer)
    scaler.update()
    return {
        "supported": True,
        "placements": [str(p) for p in model.theta.placements],
        "local_scaled_grad": [json_number(x) for x in local_grad],
        "skip": not steps,
        "norm": json_number(norm),
        "params": dict(zip(ids, model.theta.full_tensor().detach().tolist(), strict=True)),
        "successful_steps": len(steps),
        "scaler_scale_after": scaler.get_scale(),
    }


def compute(params: Params, rank: int, world_size: int) -> dict:
    """Every scenario on this rank (world_size is WORLD_SIZE: `Params` checks it)."""
    import torch

    scenarios: dict[str, int | None] = {"finite": None}  # name -> the rank injected on
    if params.inject_overflow is not None:
        scenarios["overflow"] = params.inject_overflow
    results = {}
    for name, inject_rank in scenarios.items():
        rank_grads = scenario_grads(inject_rank, params.nonfinite)
        owners = clipping.clip_report(rank_grads, MAX_NORM, SCALE).owners
        holders = {j: sum(j in g for g in rank_grads) for j in owners}
        results[name] = {
            "protocol": _protocol(rank_grads[rank], owners, rank),
            "reference": _reference(rank_grads, owners),
            "fsdp2": _fsdp2(rank_grads[rank], owners, holders),
        }
    return {
        "torch": torch.__version__,
        "inject_overflow": params.inject_overflow,
        "nonfinite": params.nonfinite,
        "scenarios": results,
    }


def main(argv: list[str] | None = None) -> None:
    """torchrun entry point: rank<RANK>.json in --out-dir (experiments.base.rank_main)."""
    rank_main(Params, compute, argv)
