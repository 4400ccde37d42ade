"""Global gradient norm, the clip coefficient and the coordinated step (sections 08 and 09).

Gradients arrive synchronised but still multiplied by the loss scale. Rank r holds a mapping
parameter id -> scaled gradient; one id is one independent element (a tensor is many ids,
"W[0]", "W[1]", ...). An id held by several ranks is replicated and holds the same value on
each; an id held by one rank is a shard. The lowest rank holding an id owns it, and only the
owner counts it. The protocol, in the same order on every rank:

    01 unscale  g_j = G_j / scale; each rank flags any non-finite g_j it holds
    02 agree    skip = MAX of the flags: if any rank is non-finite, every rank skips
    03 reduce   s_r = sum_{j owned by r} g_j^2,  n = sqrt(sum_r s_r)
                c = 1 if n = 0, else min(1, tau / n)          (no epsilon)
    04 update   theta_j <- theta_j - lr * c * g_j; a skip leaves parameters, optimizer
                state and the successful-step count exactly as they were

The norm is overflow-safe (`norm_parts`). Beside it, the variants real code has shipped: per-rank
local norms, every replicated copy counted, clipping before unscaling, ranks skipping alone.

Run: python -c "from pclab.core import clipping as c; print(c.clip_report([{'w0': 24}], 1))"
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from pclab.core import validation as v
from pclab.core.clipping_presets import (
    INJECTIONS as INJECTIONS,  # presets: importable from here too
)
from pclab.core.clipping_presets import SCENARIOS as SCENARIOS
from pclab.core.clipping_presets import Grads as Grads
from pclab.core.clipping_presets import scenario_grads as scenario_grads
from pclab.core.clipping_step import RankStep as RankStep
from pclab.core.clipping_step import clip_coefficient as clip_coefficient
from pclab.core.clipping_step import norm_parts as norm_parts
from pclab.core.clipping_step import rank_steps

VARIANTS = ("global", "per_rank", "double_counted", "before_unscale", "local_skip")
PROTOCOL = ("unscale", "agree", "reduce", "update")
BROKEN_STEP = dict(
    zip(VARIANTS, (None, "reduce", "reduce", "unscale", "agree"))
)  # the step each gets wrong


@dataclass(frozen=True)
class ClipReport:
    owners: dict[str, int]  # id -> the rank that counts it (lowest holder)
    scaled: tuple[Grads, ...]
    unscaled: tuple[Grads, ...]
    nonfinite: tuple[bool, ...]  # each rank's own flag (01)
    skip: bool  # the agreed decision (02)
    owned_square_sums: tuple[float | None, ...]  # s_r (03); None when skipped or beyond float64
    global_norm: float | None
    coefficient: float | None
    clipped: Grads | None  # id -> unscaled clipped gradient; None when skipped
    per_rank_norms: tuple[float | None, ...]
    per_rank_clipped: tuple[Grads | None, ...]
    double_counted_norm: float | None
    scaled_norm: float | None  # the norm clipping sees before unscaling: scale * n
    params_before: Grads
    params_after: Grads
    momentum_after: Grads
    step_after: int
    outcomes: dict[str, tuple[RankStep, ...]]  # variant -> every rank's step
    applied_norms: dict[
        str, float | None
    ]  # variant -> norm of what the owners applied (min(n, tau))
    diverged: dict[str, bool]  # variant -> ranks disagree on a parameter or the step count


def _rank_grads(rank_grads: object) -> tuple[Grads, ...]:
    if (
        isinstance(rank_grads, (str, bytes, Mapping))
        or not isinstance(rank_grads, Sequence)
        or not rank_grads
    ):
        raise v.InvalidInput("rank_grads", rank_grads, "non_empty")
    out: list[Grads] = []
    for r, grads in enumerate(rank_grads):
        if not isinstance(grads, Mapping):
            raise TypeError(
                f"rank_grads[{r}]={grads!r} is not a mapping of parameter id -> gradient"
            )
        out.append({pid: v.number(g, f"rank_grads[{r}][{pid!r}]") for pid, g in grads.items()})
    return tuple(out)


def _initial(values: object, ids: Collection[str], field: str, default: float | None) -> Grads:
    """Validate an id -> value mapping; `default` fills missing ids (None: they stay out)."""
    values = {} if values is None else values
    if not isinstance(values, Mapping):
        raise TypeError(f"{field}={values!r} is not a mapping of parameter id -> value")
    if unknown := [pid for pid in values if pid not in ids]:
        raise v.InvalidInput(field, unknown[0], "one_of", "an id some rank holds")
    got = {pid: values.get(pid, default) for pid in ids if default is not None or pid in values}
    return {pid: v.finite(x, f"{field}[{pid!r}]") for pid, x in got.items()}


def _owned_applied(steps: tuple[RankStep, ...], owners: Mapping[str, int]) -> Grads | None:
    """id -> the gradient its owner applied; None when an owner skipped."""
    applied = {j: steps[r].applied for j, r in owners.items()}
    values = {j: a[j] for j, a in applied.items() if a is not None}
    return values if len(values) == len(owners) else None


def clip_report(
    rank_grads: Sequence[Mapping[str, float]],
    max_norm: float,
    scale: float = 1.0,
    lr: float = 0.1,
    params: Mapping[str, float] | None = None,
    *,
    momentum: float = 0.0,
    momentum_buffers: Mapping[str, float] | None = None,
    step: int = 0,
) -> ClipReport:
    """Clip synchronised, loss-scaled gradients by one global norm and take the coordinated step.

        n = sqrt(sum_r sum_{j owned by r} (G_j / scale)^2),  c = 1 if n = 0 else min(1, tau / n)

    Args:
        rank_grads: per rank, parameter id -> scaled gradient; non-finite values are
            legitimate and make every rank skip.  max_norm: tau >= 0.  scale: > 0.
        lr, params: SGD rate >= 0 and id -> initial value (default 1.0 for every id).
        momentum, momentum_buffers, step: SGD momentum >= 0, its buffers (missing: no history
            yet) and the successful-step count before this update.
    Returns: a ClipReport, the correct figures plus every variant's per-rank outcome.
    Raises: ValueError naming the value (tau < 0 or not finite, scale <= 0 or not finite,
        replicated copies that disagree); TypeError for a value that is not a number.
    """
    scaled = _rank_grads(rank_grads)
    tau, scale = v.non_negative(max_norm, "max_norm"), v.positive(scale, "scale")
    lr, momentum, step = (
        v.non_negative(lr, "lr"),
        v.non_negative(momentum, "momentum"),
        v.count(step, "step"),
    )
    owners: dict[str, int] = {}
    for r, grads in enumerate(scaled):
        owners |= {pid: r for pid in grads if pid not in owners}
    initial = _initial(params, owners, "params", 1.0)
    buffers = _initial(momentum_buffers, owners, "momentum_buffers", None)
    # 01 unscale; each rank flags all it holds (a copy it does not count can overflow too).
    unscaled = tuple({j: g / scale for j, g in grads.items()} for grads in scaled)
    nonfinite = tuple(not all(map(math.isfinite, grads.values())) for grads in unscaled)
    skip = any(nonfinite)  # 02 agree
    for r, grads in enumerate(() if skip else unscaled):  # replicated copies must agree
        for j in (j for j, g in grads.items() if g != unscaled[owners[j]][j]):
            raise v.InvalidInput(
                f"rank_grads[{r}][{j!r}]", scaled[r][j], "in_range", "equal on every rank"
            )

    def owned(grads_by_rank: Sequence[Grads], ranks: Iterable[int]) -> list[list[float]]:
        return [[g for j, g in grads_by_rank[r].items() if owners[j] == r] for r in ranks]

    def norm(groups: Iterable[Iterable[float]]) -> tuple[float, list[float | None]]:
        return norm_parts(groups, allow_overflow=True)

    world, everyone = len(scaled), range(len(scaled))
    n: float | None = None
    c = double = scaled_n = n
    sums: Sequence[float | None] = (None,) * world
    local = sums
    if not skip:  # 03 reduce
        n, sums = norm(owned(unscaled, everyone))
        c = clip_coefficient(n, tau)
        double = norm([[g for grads in unscaled for g in grads.values()]])[0]
        scaled_n = norm(owned(scaled, everyone))[0]
        local = tuple(norm([grads.values()])[0] for grads in unscaled)
    healthy = [r for r in everyone if not nonfinite[r]]  # local_skip: the ranks that still step
    healthy_n = norm(owned(unscaled, healthy))[0] if healthy else None
    plan = {  # variant -> (skip per rank, the norm each rank clips with)
        "global": ((skip,) * world, (n,) * world),
        "per_rank": ((skip,) * world, local),
        "double_counted": ((skip,) * world, (double,) * world),
        "before_unscale": ((skip,) * world, (scaled_n,) * world),
        "local_skip": (nonfinite, (healthy_n,) * world),
    }
    state = (unscaled, tau, initial, buffers, step, lr, momentum)
    outcomes = {name: rank_steps(skips, norms, *state) for name, (skips, norms) in plan.items()}

    def applied_norm(steps: tuple[RankStep, ...]) -> float | None:  # None when an owner skipped
        applied = _owned_applied(steps, owners)
        return None if applied is None else norm([applied.values()])[0]

    def diverged(steps: tuple[RankStep, ...]) -> bool:
        moved = any(s.params[j] != steps[owners[j]].params[j] for s in steps for j in s.params)
        return moved or len({s.step for s in steps}) > 1

    right = outcomes["global"]
    return ClipReport(
        owners=owners,
        scaled=scaled,
        unscaled=unscaled,
        nonfinite=nonfinite,
        skip=skip,
        owned_square_sums=tuple(sums),
        global_norm=n,
        coefficient=c,
        clipped=None if skip else _owned_applied(right, owners),
        per_rank_norms=tuple(local),
        per_rank_clipped=tuple(s.applied for s in outcomes["per_rank"]),
        double_counted_norm=double,
        scaled_norm=scaled_n,
        params_before=initial,
        params_after={j: right[owners[j]].params[j] for j in owners},
        momentum_after={
            j: b for s in right for j, b in s.momentum_buffers.items() if owners[j] == s.rank
        },
        step_after=right[0].step,
        outcomes=outcomes,
        applied_norms={name: applied_norm(steps) for name, steps in outcomes.items()},
        diverged={name: diverged(steps) for name, steps in outcomes.items()},
    )


class ThresholdRow(TypedDict):
    threshold: float
    norm: str  # the variant ("per_rank_<r>" for rank r's local norm)
    coefficient: float | None


def threshold_sweep(
    report: ClipReport, max_threshold: float | None = None, points: int = 41
) -> list[ThresholdRow]:
    """c(tau) = 1 if n = 0 else min(1, tau / n) for the correct and each wrong norm, tau in [0, max]

    Rows {"threshold", "norm", "coefficient"}; `norm` names the variant ("per_rank_<r>"
    for each rank's local norm). Empty when the step is skipped: there is no norm.
    """
    if not isinstance(report, ClipReport):
        raise TypeError(f"report={report!r} is not a ClipReport")
    if (points := v.count(points, "points", minimum=2)) > 1000:
        raise v.InvalidInput("points", points, "in_range", "2..1000")
    if report.skip or report.global_norm is None:  # None exactly when skipped
        return []
    norms = {"global": report.global_norm, "double_counted": report.double_counted_norm}
    norms |= {f"per_rank_{r}": x for r, x in enumerate(report.per_rank_norms)}
    norms["before_unscale"] = report.scaled_norm
    top = min(2 * report.global_norm, 1e308) or 1.0  # an overflowed norm: the largest top
    top = top if max_threshold is None else v.positive(max_threshold, "max_threshold")
    taus = [top * (i / (points - 1)) for i in range(points)]  # never past top, even near the limit
    rows = [(t, k, clip_coefficient(x, t)) for k, x in norms.items() for t in taus]
    return [{"threshold": t, "norm": k, "coefficient": c} for t, k, c in rows]


def protocol_marks(report: ClipReport, variant: str) -> dict[str, str]:
    """Each PROTOCOL step under `variant`: "wrong" (its faulty step, changing the outcome here),
    "latent" (the faulty step, hidden by these inputs), "skipped" (every rank skipped) or "ok"."""
    if not isinstance(report, ClipReport):
        raise TypeError(f"report={report!r} is not a ClipReport")
    variant = v.choice(variant, "variant", VARIANTS)
    steps, right = report.outcomes[variant], report.outcomes[VARIANTS[0]]
    same = all(a.params == b.params and a.step == b.step for a, b in zip(steps, right, strict=True))
    all_skip = all(s.skip for s in steps)

    def mark(name: str) -> str:
        if name == BROKEN_STEP[variant]:
            return "latent" if same else "wrong"
        return "skipped" if all_skip and name in ("reduce", "update") else "ok"

    return {name: mark(name) for name in PROTOCOL}
