"""InfoNCE with gathered negatives, run for real: P processes, shared encoder scalars, DDP.

Rank r owns one pair (a_r, b_r) and encodes it with two scalars shared by every rank,
q_r = wq a_r and d_r = wd b_r, held in a DistributedDataParallel-wrapped module. Each
query's own document is its positive; similarity is the un-normalised product over tau:

    s_ij = q_i d_j / tau,   L_i = logsumexp_j s_ij - s_ii,   L = (1/P) sum_i L_i.

One launch runs every scheme of `SCHEMES` (how a rank sees the other ranks' documents):
    gather               differentiable all-gather; its backward sums every rank's part
                         into the document's owner                (rank loss L_r)
    detach               remote documents detached                (rank loss L_r)
    local                candidates are only the rank's own pair  (rank loss 0)
    full_loss_each_rank  every rank computes L with its own features re-inserted
then DDP's mean and one SGD step (lr 0.1). Rank 0 also computes the single-process
reference: plain autograd on the whole batch, d L / d(wq, wd).

    python -m runners.negatives --json [--world-size P] [--tau T]     # P in 2..8
    torchrun --standalone --nproc-per-node 4 -m runners.negatives --out-dir /tmp/neg
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from core import validation as v
from runners.cli import experiment_parser, launch_with_report, run_for_cli
from runners.launcher import RunResult, init_worker, worker_device, write_rank_output

WORKER = "runners.negatives"
SCHEMES = ("gather", "detach", "local", "full_loss_each_rank")
LR = 0.1
MIN_WORLD_SIZE, MAX_WORLD_SIZE = 2, 8
DEFAULTS = {"tau": 1.0, "wq": 1.0, "wd": 1.0}


def default_pairs(world_size: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The seed's a = [1, 2], b = [1, -1], extended deterministically for more ranks:

    a_r = r + 1,   b_r = (-1)^r / 2^floor(r/2)     (b = 1, -1, 0.5, -0.5, 0.25, ...)
    """
    world_size = v.count(world_size, "world_size", minimum=1)
    a = tuple(float(r + 1) for r in range(world_size))
    b = tuple((-1.0) ** r / 2.0 ** (r // 2) for r in range(world_size))
    return a, b


# ---------------------------------------------------------------- worker (one per rank)


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


def _run_scheme(scheme: str, a_r: float, b_r: float, args, rank: int, world_size: int) -> dict:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    device = worker_device()

    class Encoders(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wq = torch.nn.Parameter(torch.tensor(args.wq))
            self.wd = torch.nn.Parameter(torch.tensor(args.wd))

        def forward(self, a, b):
            return self.wq * a, self.wd * b

    model = Encoders().to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    inputs = (torch.tensor([a_r], device=device), torch.tensor([b_r], device=device))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    with ddp.no_sync():  # this rank's own gradient, before DDP averages it
        q, d = ddp(*inputs)
        _scheme_loss(scheme, q, d, rank, world_size, args.tau).backward()
    grad_local = (model.wq.grad.item(), model.wd.grad.item())
    optimizer.zero_grad(set_to_none=True)

    q, d = ddp(*inputs)
    loss = _scheme_loss(scheme, q, d, rank, world_size, args.tau)
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


def worker_main(argv: list[str] | None = None) -> None:
    """torchrun entry point: one pair per rank, every scheme, rank<RANK>.json in --out-dir."""
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    @record  # a raising rank leaves torchrun an error file: the launcher's root cause
    def main() -> None:
        parser = argparse.ArgumentParser(prog=WORKER)
        parser.add_argument("--out-dir", required=True)
        for name, default in (*DEFAULTS.items(), ("lr", LR)):
            parser.add_argument(f"--{name}", type=float, default=default)
        args = parser.parse_args(argv)
        rank, world_size = init_worker()
        a, b = default_pairs(world_size)
        payload = {
            "rank": rank,
            "world_size": world_size,
            "backend": dist.get_backend(),
            "a": a,
            "b": b,
            **{name: getattr(args, name) for name in (*DEFAULTS, "lr")},
            "schemes": {s: _run_scheme(s, a[rank], b[rank], args, rank, world_size) for s in SCHEMES},
            "reference": _reference(a, b, args.wq, args.wd, args.tau, args.lr),
        }
        write_rank_output(args.out_dir, rank, payload)
        dist.destroy_process_group()

    main()


# ---------------------------------------------------------------- launcher side


def build_report(ranks: tuple[dict, ...]) -> dict:
    """The CLI's JSON: the DDP result per scheme, per-rank detail, and the distance from the
    single-process reference. Raises ValueError if the ranks disagree on the inputs."""
    first = ranks[0]
    keys = ("a", "b", "wq", "wd", "tau", "lr", "world_size", "backend")
    if any(r[k] != first[k] for r in ranks for k in keys):
        raise ValueError("ranks disagree on the inputs")
    reference = first["reference"]
    schemes = {}
    for name in SCHEMES:
        per_rank = [r["schemes"][name] for r in ranks]
        after = per_rank[0]
        schemes[name] = {
            "grad_wq": after["grad_wq"],
            "grad_wd": after["grad_wd"],
            "params_after_sgd": after["params_after_sgd"],
            # DDP's promise: every replica holds the same gradient and takes the same step
            "ranks_agree": all(
                s[k] == after[k] for s in per_rank for k in ("grad_wq", "grad_wd", "params_after_sgd")
            ),
            "max_diff_from_reference": max(
                abs(after["grad_wq"] - reference["grad_wq"]), abs(after["grad_wd"] - reference["grad_wd"])
            ),
            "ranks": [
                {
                    "rank": r["rank"],
                    "local_loss": s["local_loss"],
                    "grad_wq_local": s["grad_wq_local"],
                    "grad_wd_local": s["grad_wd_local"],
                    "sha256": r["sha256"],
                }
                for r, s in zip(ranks, per_rank, strict=True)
            ],
        }
    return {**{k: first[k] for k in keys}, "reference": reference, "schemes": schemes}


def _finite(value: object) -> bool:
    if isinstance(value, dict):
        return all(_finite(x) for x in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(x) for x in value)
    return not isinstance(value, float) or math.isfinite(value)


def check_params(world_size: int, tau: float, wq: float, wd: float) -> dict:
    """Validated parameters of one launch (ValueError / TypeError naming a bad value)."""
    world_size = v.count(world_size, "world_size", minimum=1)
    if not MIN_WORLD_SIZE <= world_size <= MAX_WORLD_SIZE:
        raise v.InvalidInput("world_size", world_size, "in_range", f"{MIN_WORLD_SIZE}..{MAX_WORLD_SIZE}")
    return {
        "world_size": world_size,
        "tau": v.positive(tau, "tau"),
        "wq": v.finite(wq, "wq"),
        "wd": v.finite(wd, "wd"),
    }


def run(
    world_size: int = 2,
    tau: float = 1.0,
    wq: float = 1.0,
    wd: float = 1.0,
    *,
    timeout_s: float = 120.0,
    pg_timeout_s: float = 60.0,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Launch the experiment on `world_size` processes; `.report` is the CLI's JSON dict.

    A failed or timed-out run returns ok=False with a one-line message (never raises);
    invalid parameters raise ValueError / TypeError before anything is launched.
    """
    params = check_params(world_size, tau, wq, wd)
    worker_args = [f"--{k}={params[k]!r}" for k in ("tau", "wq", "wd")] + [f"--lr={LR!r}"]
    result = launch_with_report(
        WORKER,
        params["world_size"],
        worker_args,
        build_report,
        timeout_s=timeout_s,
        pg_timeout_s=pg_timeout_s,
        progress=progress,
    )
    if not result.ok:
        return result
    if not _finite(result.report):
        message = "the run produced non-finite numbers (tau too small or weights too large)"
        return replace(result, ok=False, ranks=(), report=None, message=message)
    return result


def cli(argv: list[str] | None = None) -> int:
    """`python -m runners.negatives`: 0 ok, 1 failed run, 2 bad arguments (one line each)."""
    parser = experiment_parser("runners.negatives", __doc__, timeout_s=120.0)
    parser.add_argument("--world-size", type=int, default=2, help="processes P, 2..8 (default 2)")
    for name, default in DEFAULTS.items():
        parser.add_argument(f"--{name}", type=float, default=default, help=f"default {default}")
    args = parser.parse_args(argv)
    try:
        check_params(args.world_size, args.tau, args.wq, args.wd)
        v.positive(args.timeout, "timeout")
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    start = partial(run, args.world_size, args.tau, args.wq, args.wd, timeout_s=args.timeout)
    result = run_for_cli(parser, start)
    if result is None:
        return 1
    if args.json:
        print(json.dumps(result.report, indent=2))
    else:
        report = result.report
        print(f"P={report['world_size']} tau={report['tau']:g} a={report['a']} b={report['b']}")
        ref = report["reference"]
        print(f"{'reference':<20} grad_wq={ref['grad_wq']:+.12f} grad_wd={ref['grad_wd']:+.12f}")
        for name, s in report["schemes"].items():
            print(
                f"{name:<20} grad_wq={s['grad_wq']:+.12f} grad_wd={s['grad_wd']:+.12f}"
                f"  max|diff|={s['max_diff_from_reference']:.3e}"
            )
    return 0


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        worker_main()
    else:
        sys.exit(cli())
