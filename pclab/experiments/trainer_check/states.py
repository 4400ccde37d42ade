"""Parameters and optimizer state as the trainer check compares them (every mode, on a rank):
a State is float64 tensors by name ("parameter <name>", "optimizer <key> of <name>", as
trainer.snapshot reads them); its comparison with the reference, the reference's own floor,
and the ranks' spread."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict

import torch

State = dict[str, torch.Tensor]  # "parameter <name>" / "optimizer <key> of <name>" -> float64
NAN_CODE, INF_CODE = 7.0e300, 8.0e300  # NaN and inf in rank_spread: equal where ranks agree
# bit for bit on where they are; a finite number across from them spreads past 1e300


class Divergence(TypedDict):
    """The first tensor beyond the tolerance (abs_diff None: missing, shape, non-finite)."""

    tensor: str
    abs_diff: float | None
    why: str  # differs, missing, unexpected, shape, non-finite


def parameters_of(state: State) -> State:
    """A state's parameters alone (its optimizer-state tensors left out)."""
    return {k: t for k, t in state.items() if k.startswith("parameter ")}


def readable(want: State, state_read: bool) -> State:
    """The part of a reference state a loop's step can be compared on: all of it, or, where a
    wrapper's optimizer stepped (ZeRO's flat partitions, whose state is keyed by none of the
    model's parameters: Step.state_read False), its parameters alone."""
    return want if state_read else parameters_of(want)


def compare(got: State, want: State, tolerance: float) -> tuple[float | None, Divergence | None]:
    """(max |got - want| over every tensor, the first tensor beyond `tolerance`). A tensor
    that one side lacks, or of another shape, diverges at once; a non-finite gap is None."""
    worst = 0.0
    first: Divergence | None = None
    for name in [*want, *(n for n in got if n not in want)]:
        if name not in got or name not in want or got[name].shape != want[name].shape:
            missing = "missing" if name not in got else "unexpected"
            detail = missing if name in want or name in got else "shape"
            return None, first or {"tensor": name, "abs_diff": None, "why": detail}
        gap = float((got[name] - want[name]).abs().max()) if got[name].numel() else 0.0
        if not math.isfinite(gap):  # NaN or inf: not a number to report
            return None, first or {"tensor": name, "abs_diff": None, "why": "non-finite"}
        worst = max(worst, gap)
        if gap > tolerance and first is None:
            first = {"tensor": name, "abs_diff": gap, "why": "differs"}
    return worst, first


class ExtraState(TypedDict):
    keys: list[str]  # sorted optimizer-state keys
    parameters: int  # how many parameters carry them


def extra_state(got: State, want: State) -> ExtraState:
    """Optimizer state the user's step created that the reference has none of:
    {"keys": sorted state keys, "parameters": how many parameters carry them}."""
    extra = [n for n in got if n.startswith("optimizer ") and n not in want]
    keys = sorted({n.split(" ")[1] for n in extra})
    return {"keys": keys, "parameters": len({n.split(" of ", 1)[1] for n in extra})}


def floor(reordered: State, want: State, dtype: str) -> float | None:
    """The reference's own precision floor in `dtype`: its largest gap to itself with the
    microbatches summed in the other order, and at least one unit in the last place of its
    largest parameter (None when either is not finite)."""
    spread, _ = compare(reordered, want, float("inf"))
    largest = max((float(t.abs().max()) for t in want.values() if t.numel()), default=0.0)
    if spread is None or not math.isfinite(largest):
        return None
    eps: float = torch.finfo(getattr(torch, dtype)).eps
    return max(spread, eps * largest)


def same_state(a: State, b: State) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype's short name, the way DTYPE spells it: torch.float32 -> "float32"."""
    return str(dtype).removeprefix("torch.")


def first_not_in(named: Mapping[str, torch.Tensor], dtype: str) -> tuple[str, str] | None:
    """(name, dtype_name) of the first tensor in `named` that is not in `dtype` (a DTYPE such
    as "float64"), or None when all are: what build_model or train_step got wrong."""
    declared = getattr(torch, dtype)
    return next(((n, dtype_name(t.dtype)) for n, t in named.items() if t.dtype != declared), None)


def rank_spread(state: State, device: torch.device) -> float | None:
    """max over elements of (max - min across ranks) of the same state; None when the ranks
    hold differently shaped state, or a NaN or inf where another rank holds something else
    (ranks that hold the same NaNs agree: that is non_finite, not disagreement)."""
    import torch
    import torch.distributed as dist

    vector = [t.flatten() for t in state.values()]
    flat = torch.cat(vector).to(device) if vector else torch.zeros(0, device=device)
    flat = flat.nan_to_num(nan=NAN_CODE, posinf=INF_CODE, neginf=-INF_CODE)
    sizes = torch.tensor([flat.numel(), -flat.numel()], dtype=torch.float64, device=device)
    dist.all_reduce(sizes, op=dist.ReduceOp.MAX)
    if sizes[0] != -sizes[1]:
        return None
    high, low = flat.clone(), flat.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    if not flat.numel():
        return 0.0
    spread = float((high - low).abs().max())
    return spread if spread < 1e300 else None


def first_non_finite(state: State) -> dict[str, Any] | None:
    """The first tensor (parameters, then optimizer state) holding a NaN or inf: its name,
    how many such values, and how many tensors hold any."""
    bad = [(k, t) for k, t in state.items() if not bool(t.isfinite().all())]
    if not bad:
        return None
    name, tensor = bad[0]
    return {
        "tensor": name,
        "values": int((~tensor.isfinite()).sum()),
        "nan": bool(tensor.isnan().any()),
        "tensors": len(bad),
    }
