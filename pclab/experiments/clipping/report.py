"""The clipping experiment's report: every rank's decision and step beside core's prediction,
the single-process clip_grad_norm_ reference and FSDP2, and whether they all agree."""

from __future__ import annotations

import math
from typing import TypedDict

from pclab.core import clipping
from pclab.experiments.clipping.params import LAYOUT, LR, MAX_NORM, MOMENTUM, SCALE, scenario_grads
from pclab.experiments.clipping.worker import json_number

TORCH_CLIP_EPS = 1e-6  # clip_grad_norm_ uses max_norm / (n + 1e-6); core uses no epsilon
TOLERANCE = 1e-12  # relative, for sums taken in a different order


class ClippingReport(TypedDict):
    world_size: int
    backend: str
    torch: str
    layout: str
    scale: float
    max_norm: float
    lr: float
    momentum: float
    nonfinite: str
    fsdp2_supported: bool
    scenarios: dict[str, dict]  # finite / overflow: ranks, core, references, agreements
    agree: bool


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


def build_report(ranks: tuple[dict, ...]) -> ClippingReport:
    """The CLI's JSON: per scenario, every rank's decision and step, the core prediction, the
    single-process and FSDP2 references, and whether they all agree."""
    first = ranks[0]
    scenarios = {}
    for name in first["scenarios"]:
        inject_rank = first["inject_overflow"] if name == "overflow" else None
        rank_grads = scenario_grads(inject_rank, first["nonfinite"])
        core = _predicted(rank_grads)
        per_rank = [dict(r["scenarios"][name]["protocol"], rank=r["rank"]) for r in ranks]
        merged: dict[str, float] = {}
        for row in per_rank:
            merged |= {j: x for j, x in row["params"].items() if j not in merged}
        shared = ("skip", "norm", "coefficient", "successful_steps")
        identical = all(row[k] == per_rank[0][k] for row in per_rank for k in shared) and all(
            row["params"][j] == merged[j] for row in per_rank for j in row["params"]
        )
        buffers: dict[str, float] = {}
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
                **{
                    k: r["scenarios"][name]["fsdp2"].get(k)
                    for k in ("local_scaled_grad", "skip", "norm")
                },
            }
            for r in ranks
        ]
        if agree_fsdp2 is not None:  # every rank gathered the same parameters and made one decision
            same = all(r["scenarios"][name]["fsdp2"]["params"] == fsdp2["params"] for r in ranks)
            agree_fsdp2 = agree_fsdp2 and same and len({r["skip"] for r in fsdp2_ranks}) == 1
        references_identical = all(r["scenarios"][name]["reference"] == reference for r in ranks)
        scenarios[name] = {
            "inject": None
            if inject_rank is None
            else {"rank": inject_rank, "id": f"w{inject_rank}"},
            "rank_grads": [{j: json_number(g) for j, g in grads.items()} for grads in rank_grads],
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
        "agree": all(s["agree_core"] and s["agree_reference"] for s in scenarios.values())
        and all(fsdp2_ok),
    }


def agrees(report: dict) -> bool:
    """Every scenario's ranks match core.clipping and torch's own clip_grad_norm_."""
    return bool(report["agree"])
