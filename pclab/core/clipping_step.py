"""The per-rank arithmetic of core.clipping: the overflow-safe global norm, the clip
coefficient and step 04 (SGD with momentum, or a skip) on every rank.

    >>> clip_coefficient(5.0, 1.0)
    0.2
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import overload

from pclab.core import validation as v
from pclab.core.clipping_presets import Grads


def norm_parts(
    groups: Iterable[Iterable[object]], *, allow_overflow: bool = False
) -> tuple[float, list[float | None]]:
    """n = m sqrt(sum_r sum_grp (g/m)^2), m = max |g|, and each group's s_r = sum_grp g^2.

    Every term is <= 1: n is finite wherever representable. Beyond float64 n is refused unless
    `allow_overflow` (clip_report: c = 0) and s_r is None. Non-finite gradients are refused."""
    values = [[v.finite(g, "values[]") for g in grp] for grp in groups]
    m = max((abs(g) for grp in values for g in grp), default=0.0)
    if m == 0:
        return 0.0, [0.0] * len(values)
    parts = [math.fsum((g / m) ** 2 for g in grp) for grp in values]
    n, sums = (
        m * math.sqrt(math.fsum(parts)),
        [m * (m * p) for p in parts],
    )  # m * p: no early overflow
    n = n if allow_overflow else v.finite_result(n, "groups", values)
    return n, [s if math.isfinite(s) else None for s in sums]


@overload
def clip_coefficient(norm: float, max_norm: float) -> float: ...
@overload
def clip_coefficient(norm: float | None, max_norm: float) -> float | None: ...
def clip_coefficient(norm: float | None, max_norm: float) -> float | None:
    """c = 1 when norm = 0, else min(1, max_norm / norm) (0 for norm = inf); None for norm None."""
    max_norm = v.non_negative(max_norm, "max_norm")
    if norm is not None and not v.number(norm, "norm") >= 0:  # NaN or negative: not a norm
        raise v.InvalidInput("norm", norm, "non_negative")
    return None if norm is None else 1.0 if norm == 0 else min(1.0, max_norm / norm)


@dataclass(frozen=True)
class RankStep:
    """What one rank did in step 04 under one variant."""

    rank: int
    skip: bool
    norm: float | None  # the norm this rank clipped with; None when it skipped
    coefficient: float | None
    applied: Grads | None  # id -> gradient handed to the optimizer; None when skipped
    params: Grads  # the ids this rank holds, after the step
    momentum_buffers: Grads
    step: int  # successful optimizer steps so far


def rank_steps(
    skips: Sequence[bool],
    norms: Sequence[float | None],
    held: Sequence[Grads],
    tau: float,
    params: Grads,
    buffers: Grads,
    step: int,
    lr: float,
    momentum: float,
) -> tuple[RankStep, ...]:
    """Step 04 on every rank: SGD (torch's rule: buf = g, then mu * buf + g) unless it skips.

    A rank that steps has a norm (`norms[r]` is None only where every rank skips)."""
    out = []
    for r, grads in enumerate(held):
        p, b = {j: params[j] for j in grads}, {j: buffers[j] for j in grads if j in buffers}
        norm = norms[r]
        if skips[r] or norm is None:
            out.append(RankStep(r, True, None, None, None, p, b, step))
            continue
        c = clip_coefficient(norm, tau)
        applied = {j: c * g for j, g in grads.items()}
        if momentum:
            b = {j: d if j not in b else momentum * b[j] + d for j, d in applied.items()}
        d = b if momentum else applied
        out.append(
            RankStep(r, False, norm, c, applied, {j: p[j] - lr * d[j] for j in p}, b, step + 1)
        )
    return tuple(out)
