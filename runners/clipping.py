"""The coordinated, clipped step run for real: two Gloo processes, one fixed order of reductions.

Both ranks hold the seed's layout (core.clipping.SCENARIOS["seed_replicated"]): rank 0 owns
shard w0 (g = 3), rank 1 owns shard w1 (g = 4), and both hold the replicated `shared` (g = 12,
owned by rank 0), all multiplied by the loss scale 8. Each scenario is one update, in the same
order on every rank:

    01 unscale  grad /= scale; flag any non-finite gradient this rank holds
    02 agree    all_reduce MAX of [flag, max |g| over owned]      -> skip, m
    03 reduce   all_reduce SUM of sum_owned (g/m)^2                -> n = m sqrt(.)
                (issued even when skipping, so the collectives never fall out of step)
    --          all_reduce MAX of [skip, c, -c]: every rank checks it holds the shared decision
    04 update   grad *= c; SGD(lr 0.1, momentum 0.9) steps, or nothing changes at all

once with every gradient finite and, with --inject-overflow R, once with rank R's shard
overwritten by inf (or nan). Every rank also computes two references on the same gradients:
a single-process model holding every independent parameter once, driven by
torch.amp.GradScaler + torch.nn.utils.clip_grad_norm_, and the same model sharded with FSDP2
(`fully_shard` over a CPU device mesh), clipped by clip_grad_norm_ on its DTensor gradients.
torch's clip_grad_norm_ divides by (n + 1e-6); the comparison allows exactly that much.

    python -m runners.clipping --json [--inject-overflow RANK] [--nonfinite inf|nan]
    torchrun --standalone --nproc-per-node 2 -m runners.clipping --out-dir /tmp/clip --inject-overflow 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from functools import partial

from core import clipping
from core import validation as v
from runners.cli import experiment_parser, launch_with_report, run_for_cli
from runners.launcher import RunResult, init_worker, write_rank_output

WORKER = "runners.clipping"
WORLD_SIZE = 2
LAYOUT, SCALE, MAX_NORM, LR, MOMENTUM = "seed_replicated", 8.0, 1.0, 0.1, 0.9
TORCH_CLIP_EPS = 1e-6  # clip_grad_norm_ uses max_norm / (n + 1e-6); core uses no epsilon
TOLERANCE = 1e-12  # relative, for sums taken in a different order


def scenario_grads(inject_rank: int | None, nonfinite: str = "inf") -> tuple[dict[str, float], ...]:
    """The scaled per-rank gradients of one scenario (inject_rank None: all finite)."""
    inject = None if inject_rank is None else (inject_rank, f"w{inject_rank}", nonfinite)
    return clipping.scenario_grads(LAYOUT, SCALE, inject=inject)


def _num(x: float) -> float | str:
    """JSON has no inf / nan: those travel as the strings "inf", "-inf", "nan"."""
    return x if math.isfinite(x) else str(x)


# ---------------------------------------------------------------- worker (one per rank)


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
    coefficient = None if skip else (1.0 if norm == 0 else min(1.0, MAX_NORM / norm))
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
        j: optimizer.state[p]["momentum_buffer"].item() for j, p in params.items() if optimizer.state[p]
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
    coefficient = (theta.grad[big] / unclipped[big]).item() if finite and unclipped[big] != 0 else None
    scaler.step(optimizer)
    scaler.update()
    state = optimizer.state[theta]
    return {
        "skip": not steps,
        "norm": _num(norm),
        "coefficient": coefficient if finite else None,
        "params": dict(zip(ids, theta.detach().tolist(), strict=True)),
        "momentum_buffers": dict(zip(ids, state["momentum_buffer"].tolist(), strict=True)) if state else {},
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
        "local_scaled_grad": [_num(x) for x in local_grad],
        "skip": not steps,
        "norm": _num(norm),
        "params": dict(zip(ids, model.theta.full_tensor().detach().tolist(), strict=True)),
        "successful_steps": len(steps),
        "scaler_scale_after": scaler.get_scale(),
    }


def worker_main(argv: list[str] | None = None) -> None:
    """torchrun entry point: every scenario on this rank, rank<RANK>.json in --out-dir."""
    import torch
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    @record  # a raising rank leaves torchrun an error file: the launcher's root cause
    def main() -> None:
        parser = argparse.ArgumentParser(prog=WORKER)
        parser.add_argument("--out-dir", required=True)
        parser.add_argument("--inject-overflow", type=int, default=None)
        parser.add_argument("--nonfinite", choices=tuple(clipping.INJECTIONS), default="inf")
        args = parser.parse_args(argv)
        rank, world_size = init_worker()
        if world_size != WORLD_SIZE:
            raise ValueError(f"world_size={world_size} is invalid: expected {WORLD_SIZE}")
        scenarios = {"finite": None}
        if args.inject_overflow is not None:
            scenarios["overflow"] = args.inject_overflow
        results = {}
        for name, inject_rank in scenarios.items():
            rank_grads = scenario_grads(inject_rank, args.nonfinite)
            owners = clipping.clip_report(rank_grads, MAX_NORM, SCALE).owners
            holders = {j: sum(j in g for g in rank_grads) for j in owners}
            results[name] = {
                "protocol": _protocol(rank_grads[rank], owners, rank),
                "reference": _reference(rank_grads, owners),
                "fsdp2": _fsdp2(rank_grads[rank], owners, holders),
            }
        payload = {
            "rank": rank,
            "world_size": world_size,
            "backend": dist.get_backend(),
            "torch": torch.__version__,
            "inject_overflow": args.inject_overflow,
            "nonfinite": args.nonfinite,
            "scenarios": results,
        }
        write_rank_output(args.out_dir, rank, payload)
        dist.destroy_process_group()

    main()


# ---------------------------------------------------------------- launcher side


def _max_diff(a: dict, b: dict) -> float:
    if a.keys() != b.keys():
        return math.inf
    return max((abs(a[k] - b[k]) for k in a), default=0.0)


def _predicted(rank_grads, momentum: float = MOMENTUM) -> dict:
    report = clipping.clip_report(rank_grads, MAX_NORM, SCALE, LR, momentum=momentum)
    return {
        "skip": report.skip,
        "norm": report.global_norm,
        "coefficient": report.coefficient,
        "params": report.params_after,
        "momentum_buffers": report.momentum_after,
        "successful_steps": report.step_after,
    }


def _torch_close(got: dict, core: dict) -> tuple[bool, float]:
    """Does a torch clip_grad_norm_ result match core, allowing torch's 1e-6 epsilon?"""
    if got["skip"] or core["skip"]:
        same = got["skip"] == core["skip"] and got["successful_steps"] == core["successful_steps"]
        diff = _max_diff(got["params"], core["params"])
        return same and diff == 0.0, diff
    n = core["norm"]
    # c differs by at most tau/n - tau/(n + eps) <= tau eps / n^2, and every |g| <= n, so a
    # parameter (moved by lr * c * g on a first momentum step) differs by at most lr tau eps / n.
    slack = LR * MAX_NORM * TORCH_CLIP_EPS / n if n else 0.0
    diff = _max_diff(got["params"], core["params"])
    norm_ok = isinstance(got["norm"], float) and abs(got["norm"] - n) <= TOLERANCE * max(n, 1.0)
    return norm_ok and diff <= slack + TOLERANCE, diff


def build_report(ranks: tuple[dict, ...]) -> dict:
    """The CLI's JSON: per scenario, every rank's decision and step, the core prediction, the
    single-process and FSDP2 references, and whether they all agree."""
    first = ranks[0]
    scenarios = {}
    for name in first["scenarios"]:
        inject_rank = first["inject_overflow"] if name == "overflow" else None
        rank_grads = scenario_grads(inject_rank, first["nonfinite"])
        core = _predicted(rank_grads)
        per_rank = [dict(r["scenarios"][name]["protocol"], rank=r["rank"]) for r in ranks]
        merged = {}
        for row in per_rank:
            merged |= {j: x for j, x in row["params"].items() if j not in merged}
        shared = ("skip", "norm", "coefficient", "successful_steps")
        identical = all(row[k] == per_rank[0][k] for row in per_rank for k in shared) and all(
            row["params"][j] == merged[j] for row in per_rank for j in row["params"]
        )
        buffers = {}
        for row in per_rank:
            buffers |= {j: x for j, x in row["momentum_buffers"].items() if j not in buffers}
        diff = max(_max_diff(merged, core["params"]), _max_diff(buffers, core["momentum_buffers"]))
        norm_ok = (per_rank[0]["norm"] is None) == (core["norm"] is None) and (
            core["norm"] is None
            or abs(per_rank[0]["norm"] - core["norm"]) <= TOLERANCE * max(core["norm"], 1)
        )
        agree_core = (
            identical
            and all(row["decision_agreed"] for row in per_rank)
            and per_rank[0]["skip"] == core["skip"]
            and norm_ok
            and diff <= TOLERANCE
        )
        reference = first["scenarios"][name]["reference"]
        fsdp2 = first["scenarios"][name]["fsdp2"]
        agree_ref, ref_diff = _torch_close(reference, core)
        agree_fsdp2, fsdp2_diff = _torch_close(fsdp2, core) if fsdp2["supported"] else (None, None)
        fsdp2_ranks = [
            {
                "rank": r["rank"],
                **{k: r["scenarios"][name]["fsdp2"].get(k) for k in ("local_scaled_grad", "skip", "norm")},
            }
            for r in ranks
        ]
        if agree_fsdp2 is not None:  # every rank gathered the same parameters and made one decision
            same = all(r["scenarios"][name]["fsdp2"]["params"] == fsdp2["params"] for r in ranks)
            agree_fsdp2 = agree_fsdp2 and same and len({r["skip"] for r in fsdp2_ranks}) == 1
        references_identical = all(r["scenarios"][name]["reference"] == reference for r in ranks)
        scenarios[name] = {
            "inject": None if inject_rank is None else {"rank": inject_rank, "id": f"w{inject_rank}"},
            "rank_grads": [{j: _num(g) for j, g in grads.items()} for grads in rank_grads],
            "ranks": per_rank,
            "ranks_identical": identical,
            "core": core,
            "agree_core": agree_core,
            "max_param_diff_core": diff,
            "reference": reference,
            "references_identical_on_every_rank": references_identical,
            "agree_reference": agree_ref and references_identical,
            "max_param_diff_reference": ref_diff,
            "fsdp2": fsdp2,
            # per rank: its own shard (scaled), and the decision GradScaler reached on it
            "fsdp2_ranks": fsdp2_ranks,
            "agree_fsdp2": agree_fsdp2,
            "max_param_diff_fsdp2": fsdp2_diff,
        }
    fsdp2_ok = [s["agree_fsdp2"] for s in scenarios.values() if s["agree_fsdp2"] is not None]
    return {
        "world_size": first["world_size"],
        "backend": first["backend"],
        "torch": first["torch"],
        "layout": LAYOUT,
        "scale": SCALE,
        "max_norm": MAX_NORM,
        "lr": LR,
        "momentum": MOMENTUM,
        "nonfinite": first["nonfinite"],
        "fsdp2_supported": all(s["fsdp2"]["supported"] for s in scenarios.values()),
        "scenarios": scenarios,
        "agree": all(s["agree_core"] and s["agree_reference"] for s in scenarios.values()) and all(fsdp2_ok),
    }


def summary_rows(report: dict) -> list[dict]:
    """One row per scenario and rank, the real decision beside core's prediction, for a page.

    Language-neutral values: scenario ("finite" | "overflow"), inject_rank, rank, skip, norm,
    coefficient (None when skipped), params ("id=value, ..."), core_skip, core_norm,
    core_coefficient, agrees (ranks identical and matching core, clip_grad_norm_ and FSDP2).
    """
    rows = []
    for name, s in report["scenarios"].items():
        core = s["core"]
        agrees = (
            s["ranks_identical"]
            and s["agree_core"]
            and s["agree_reference"]
            and s["agree_fsdp2"] is not False
        )
        for r in s["ranks"]:
            rows.append(
                {
                    "scenario": name,
                    "inject_rank": (s["inject"] or {}).get("rank"),
                    **{k: r[k] for k in ("rank", "skip", "norm", "coefficient")},
                    "params": ", ".join(f"{j}={x:.6f}" for j, x in sorted(r["params"].items())),
                    **{f"core_{k}": core[k] for k in ("skip", "norm", "coefficient")},
                    "agrees": agrees,
                }
            )
    return rows


def check_params(inject_overflow: int | None, nonfinite: str = "inf") -> dict:
    """Validated parameters of one launch (ValueError / TypeError naming a bad value)."""
    if inject_overflow is not None:
        inject_overflow = v.count(inject_overflow, "inject_overflow")
        if inject_overflow >= WORLD_SIZE:
            raise v.InvalidInput("inject_overflow", inject_overflow, "in_range", f"0..{WORLD_SIZE - 1}")
    return {
        "inject_overflow": inject_overflow,
        "nonfinite": v.choice(nonfinite, "nonfinite", tuple(clipping.INJECTIONS)),
    }


def run(
    inject_overflow: int | None = None,
    nonfinite: str = "inf",
    *,
    timeout_s: float = 180.0,
    pg_timeout_s: float = 60.0,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Launch both ranks: the finite scenario, plus the overflow on rank `inject_overflow`.

    `.report` is the CLI's JSON dict. A failed or timed-out run returns ok=False with a
    one-line message (never raises); invalid parameters raise before anything is launched.
    """
    params = check_params(inject_overflow, nonfinite)
    worker_args = [f"--nonfinite={params['nonfinite']}"]
    if params["inject_overflow"] is not None:
        worker_args.append(f"--inject-overflow={params['inject_overflow']}")
    return launch_with_report(
        WORKER,
        WORLD_SIZE,
        worker_args,
        build_report,
        timeout_s=timeout_s,
        pg_timeout_s=pg_timeout_s,
        progress=progress,
    )


def cli(argv: list[str] | None = None) -> int:
    """`python -m runners.clipping`: 0 ok, 1 failed run or disagreement, 2 bad arguments."""
    parser = experiment_parser("runners.clipping", __doc__, timeout_s=180.0)
    parser.add_argument("--inject-overflow", type=int, default=None, metavar="RANK", help="0 or 1")
    parser.add_argument("--nonfinite", default="inf", help="inf (default) or nan")
    args = parser.parse_args(argv)
    try:
        check_params(args.inject_overflow, args.nonfinite)
        v.positive(args.timeout, "timeout")
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    result = run_for_cli(parser, partial(run, args.inject_overflow, args.nonfinite, timeout_s=args.timeout))
    if result is None:
        return 1
    report = result.report
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"P={report['world_size']} {report['backend']} torch {report['torch']} layout={report['layout']}"
        )
        for name, s in report["scenarios"].items():
            for row in s["ranks"]:
                print(
                    f"{name:<9} rank {row['rank']}: skip={row['skip']} norm={row['norm']}"
                    f" c={row['coefficient']} params={row['params']}"
                )
            print(
                f"{name:<9} core agrees: {s['agree_core']}  clip_grad_norm_: {s['agree_reference']}"
                f"  FSDP2: {s['agree_fsdp2']}"
            )
    return 0 if report["agree"] else 1


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        worker_main()
    else:
        sys.exit(cli())
