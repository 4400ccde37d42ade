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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pclab.core import validation as v
from pclab.core.clipping_presets import (
    INJECTIONS as INJECTIONS,  # presets: importable from here too
)
from pclab.core.clipping_presets import SCENARIOS as SCENARIOS
from pclab.core.clipping_presets import scenario_grads as scenario_grads

Grads = dict[str, float]
VARIANTS = ("global", "per_rank", "double_counted", "before_unscale", "local_skip")
PROTOCOL = ("unscale", "agree", "reduce", "update")
BROKEN_STEP = dict(
    zip(VARIANTS, (None, "reduce", "reduce", "unscale", "agree"))
)  # the step each gets wrong


def norm_parts(groups, *, allow_overflow: bool = False) -> tuple[float, list[float | None]]:
    """n = m sqrt(sum_r sum_grp (g/m)^2), m = max |g|, and each group's s_r = sum_grp g^2.

    Every term is <= 1: n is finite wherever representable. Beyond float64 n is refused unless
    `allow_overflow` (clip_report: c = 0) and s_r is None. Non-finite gradients are refused."""
    groups = [[v.finite(g, "values[]") for g in grp] for grp in groups]
    m = max((abs(g) for grp in groups for g in grp), default=0.0)
    if m == 0:
        return 0.0, [0.0] * len(groups)
    parts = [math.fsum((g / m) ** 2 for g in grp) for grp in groups]
    n, sums = (
        m * math.sqrt(math.fsum(parts)),
        [m * (m * p) for p in parts],
    )  # m * p: no early overflow
    n = n if allow_overflow else v.finite_result(n, "groups", groups)
    return n, [s if math.isfinite(s) else None for s in sums]


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


def _rank_grads(rank_grads) -> tuple[Grads, ...]:
    bad = isinstance(rank_grads, (str, bytes, Mapping)) or not isinstance(rank_grads, Sequence)
    if bad or not rank_grads:
        raise v.InvalidInput("rank_grads", rank_grads, "non_empty")
    out = []
    for r, grads in enumerate(rank_grads):
        if not isinstance(grads, Mapping):
            raise TypeError(
                f"rank_grads[{r}]={grads!r} is not a mapping of parameter id -> gradient"
            )
        out.append({pid: v.number(g, f"rank_grads[{r}][{pid!r}]") for pid, g in grads.items()})
    return tuple(out)


def _initial(values, ids, field: str, default: float | None) -> Grads:
    """Validate an id -> value mapping; `default` fills missing ids (None: they stay out)."""
    values = {} if values is None else values
    if not isinstance(values, Mapping):
        raise TypeError(f"{field}={values!r} is not a mapping of parameter id -> value")
    if unknown := [pid for pid in values if pid not in ids]:
        raise v.InvalidInput(field, unknown[0], "one_of", "an id some rank holds")
    got = {pid: values.get(pid, default) for pid in ids if default is not None or pid in values}
    return {pid: v.finite(x, f"{field}[{pid!r}]") for pid, x in got.items()}


def _steps(skips, norms, held, tau, params, buffers, step, lr, momentum) -> tuple[RankStep, ...]:
    """Step 04 on every rank: SGD (torch's rule: buf = g, then mu * buf + g) unless it skips."""
    out = []
    for r, grads in enumerate(held):
        p, b = {j: params[j] for j in grads}, {j: buffers[j] for j in grads if j in buffers}
        if skips[r]:
            out.append(RankStep(r, True, None, None, None, p, b, step))
            continue
        c = clip_coefficient(norms[r], tau)
        applied = {j: c * g for j, g in grads.items()}
        if momentum:
            b = {j: d if j not in b else momentum * b[j] + d for j, d in applied.items()}
        d = b if momentum else applied
        out.append(
            RankStep(r, False, norms[r], c, applied, {j: p[j] - lr * d[j] for j in p}, b, step + 1)
        )
    return tuple(out)


def clip_report(
    rank_grads,
    max_norm,
    scale=1.0,
    lr=0.1,
    params=None,
    *,
    momentum=0.0,
    momentum_buffers=None,
    step=0,
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
    params = _initial(params, owners, "params", 1.0)
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

    def owned(grads_by_rank, ranks) -> list[list[float]]:
        return [[g for j, g in grads_by_rank[r].items() if owners[j] == r] for r in ranks]

    world, everyone, norm = (
        len(scaled),
        range(len(scaled)),
        lambda g: norm_parts(g, allow_overflow=True),
    )
    n = c = double = scaled_n = None
    sums = local = (None,) * world
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
    state = (unscaled, tau, params, buffers, step, lr, momentum)
    outcomes = {name: _steps(skips, norms, *state) for name, (skips, norms) in plan.items()}

    def applied_norm(steps) -> float | None:  # None when an owner skipped
        skipped = any(steps[r].skip for r in owners.values())
        return None if skipped else norm([[steps[owners[j]].applied[j] for j in owners]])[0]

    def diverged(steps) -> bool:
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
        clipped=None if skip else {j: right[owners[j]].applied[j] for j in owners},
        per_rank_norms=tuple(local),
        per_rank_clipped=tuple(s.applied for s in outcomes["per_rank"]),
        double_counted_norm=double,
        scaled_norm=scaled_n,
        params_before=params,
        params_after={j: right[owners[j]].params[j] for j in owners},
        momentum_after={
            j: b for s in right for j, b in s.momentum_buffers.items() if owners[j] == s.rank
        },
        step_after=right[0].step,
        outcomes=outcomes,
        applied_norms={name: applied_norm(steps) for name, steps in outcomes.items()},
        diverged={name: diverged(steps) for name, steps in outcomes.items()},
    )


def threshold_sweep(report: ClipReport, max_threshold=None, points=41) -> list[dict]:
    """c(tau) = 1 if n = 0 else min(1, tau / n) for the correct and each wrong norm, tau in [0, max]

    Rows {"threshold", "norm", "coefficient"}; `norm` names the variant ("per_rank_<r>"
    for each rank's local norm). Empty when the step is skipped: there is no norm.
    """
    if not isinstance(report, ClipReport):
        raise TypeError(f"report={report!r} is not a ClipReport")
    if (points := v.count(points, "points", minimum=2)) > 1000:
        raise v.InvalidInput("points", points, "in_range", "2..1000")
    if report.skip:
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
