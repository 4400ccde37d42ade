"""Which coupled objective a trainer really optimised: a measured update, named.

One SGD step at learning rate 1 from weights theta_0 moves the parameters by
delta = -grad J(theta_0) for the objective J the trainer optimised. Given the candidates'
gradients g_s at theta_0 (core.coupled_objectives: global_batch, the pools, the paths):

    gap_s = |delta + g_s| / max(|delta|, |g_s|)          (0 when both are 0)
    s matches                 gap_s <= rtol
    scaled                    delta = -c g,  c = -<delta, g> / |g|^2 != 1,  g = g_global_batch
                              residual |delta + c g| / |delta| <= rtol
    scaled, per parameter p   delta_p = -c_p g_p with c_p = -<delta_p, g_p> / |g_p|^2, when
                              one c does not fit (an encoder / P beside a temperature x 1)
    other                     none of these; residual: the per-parameter fit's; `fits`
                              still gives each candidate's least-squares factor

`scheme` is the first matching candidate (global_batch first), else scaled, else other.
Candidates whose gradients coincide here (at K = 1 microstep_pool is global_batch; a mean
of per-item losses over equal sizes makes every pool alike) all go in `matching_schemes`; those
alike with global_batch are `untold`: passing them is no evidence (core.update_weights'
convention for token weights).

    >>> solve_schemes({"w": [-2.0]}, {"global_batch": {"w": [1.0]}}).scale
    2.0

Run: python -m doctest pclab/core/coupled_schemes.py
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pclab.core import validation as v
from pclab.core.coupled_objectives import NAMED_SCHEMES
from pclab.core.update_weights import SCHEME_RTOL

SCHEMES = (*NAMED_SCHEMES, "scaled", "other")  # every value `scheme` takes
REFERENCE = NAMED_SCHEMES[0]  # global_batch

Vectors = dict[str, np.ndarray]  # parameter name -> flat float64 values


@dataclass(frozen=True)
class ScaleGroup:
    """Parameters that share one factor c (the update is -c times their global gradient)."""

    factor: float
    parameters: tuple[str, ...]


@dataclass(frozen=True)
class Fit:
    """delta = -factor x g_s by least squares: factor (None when g_s = 0) and residual
    |delta + factor g_s| / |delta| (None when delta = 0). An `other` update may still be one
    candidate times a factor (a loss x P on top of detached remote documents)."""

    factor: float | None
    residual: float | None


@dataclass(frozen=True)
class SchemeSolve:
    """scheme: a SCHEMES name, None when the global-batch gradient is 0 (nothing to tell);
    matching_schemes: every candidate within rtol, NAMED_SCHEMES order; gaps: gap_s per
    candidate; fits: each candidate's least-squares factor (`scale` is global_batch's);
    parameter_scales: c_p per parameter against the global-batch gradient (None where
    |g_p| <= rtol |g|); scale_groups: the distinct factors when scheme is "scaled", else ();
    residual: the named explanation's misfit (its gap; for scaled and other the fit's;
    None when delta = 0); coinciding: groups of candidates alike at this scenario; untold:
    those alike with global_batch; evidence: a pass here rules every other given candidate
    out."""

    scheme: str | None
    matching_schemes: tuple[str, ...]
    gaps: dict[str, float]
    fits: dict[str, Fit]
    parameter_scales: dict[str, float | None]
    scale_groups: tuple[ScaleGroup, ...]
    residual: float | None
    coinciding: tuple[tuple[str, ...], ...]
    untold: tuple[str, ...]
    evidence: bool

    @property
    def scale(self) -> float | None:
        """c of delta = -c g_global_batch by least squares (None when that gradient is 0)."""
        return self.fits[REFERENCE].factor


def solve_schemes(delta: object, candidates: object, rtol: float = SCHEME_RTOL) -> SchemeSolve:
    """Name the objective behind `delta` among `candidates` (see the module's formulas).

    Args:
        delta: {parameter name: the change of one SGD step at lr 1}, numbers, arrays or
            CPU tensors of any shape.
        candidates: {scheme: {parameter name: gradient}}, the NAMED_SCHEMES a scenario
            defines; global_batch is required; every gradient has delta's names and sizes.
        rtol: the relative tolerance, finite >= 0 (report.SOLVE_RTOL per DTYPE).
    Returns:
        SchemeSolve.
    Raises:
        ValueError naming the value: an unknown scheme, missing global_batch, names or
        sizes unlike delta's, non-finite numbers.
    """
    rtol = v.non_negative(rtol, "rtol")
    change, grads = _common_scale(_vectors(delta, "delta", None), candidates)
    gaps = {s: _gap(change, g) for s, g in grads.items()}
    matching = tuple(s for s in grads if gaps[s] <= rtol)
    reference = grads[REFERENCE]
    fits = {s: Fit(*_fit(_flat(change), _flat(g))) for s, g in grads.items()}
    scale, uniform_residual = fits[REFERENCE].factor, fits[REFERENCE].residual
    parameter_scales, per_residual = _per_parameter(change, reference, rtol)
    coinciding = _coinciding(grads, rtol)
    untold = next((g[1:] for g in coinciding if g[0] == REFERENCE), ())
    groups: tuple[ScaleGroup, ...] = ()
    if _norm(reference) == 0:
        scheme, residual = None, None
    elif matching:
        scheme, residual = matching[0], gaps[matching[0]]
    elif _fits(uniform_residual, rtol) and scale is not None and not _near(scale, 1.0, rtol):
        names = tuple(n for n, c in parameter_scales.items() if c is not None)
        scheme, residual, groups = "scaled", uniform_residual, (ScaleGroup(scale, names),)
    elif _fits(per_residual, rtol) and _off_one(_groups(parameter_scales, rtol), rtol):
        scheme, residual, groups = "scaled", per_residual, _groups(parameter_scales, rtol)
    else:
        scheme, residual = "other", per_residual
    return SchemeSolve(
        scheme=scheme,
        matching_schemes=matching,
        gaps=gaps,
        fits=fits,
        parameter_scales=parameter_scales,
        scale_groups=groups,
        residual=residual,
        coinciding=coinciding,
        untold=untold,
        evidence=scheme is not None and len(grads) > 1 and not untold,
    )


def _fit(change: np.ndarray, grad: np.ndarray) -> tuple[float | None, float | None]:
    """(c, |delta + c g| / |delta|) for the least-squares c of delta = -c g; c is None when
    g = 0 (or c beyond float64), the residual None when delta = 0."""
    size, length = _norm(change), _norm(grad)
    with np.errstate(over="ignore"):
        c = None if length == 0 else v.finite_or_none(-float(change @ (grad / length)) / length)
    if size == 0:
        return c, None
    return c, _norm(change + (c or 0.0) * grad) / size


def _per_parameter(
    change: Vectors, grad: Vectors, rtol: float
) -> tuple[dict[str, float | None], float | None]:
    """Each parameter's own least-squares c_p, and the residual they leave together:
    sqrt(sum_p |delta_p + c_p g_p|^2) / |delta| (None when delta = 0). A parameter whose
    gradient is at most rtol of the whole gradient gets no c_p (None): at that tolerance it
    cannot be told from rounding (an InfoNCE document bias, which no score depends on, has a
    gradient of 1e-17 and would get any factor at all); its change still counts in the
    residual."""
    floor = rtol * _norm(grad)
    scales = {n: _fit(change[n], grad[n])[0] if _norm(grad[n]) > floor else None for n in change}
    size = _norm(change)
    if size == 0:
        return scales, None
    misfit = {n: change[n] + (c or 0.0) * grad[n] for n, c in scales.items()}
    return scales, _norm(misfit) / size


def _fits(residual: float | None, rtol: float) -> bool:
    return residual is not None and residual <= rtol


def _off_one(groups: tuple[ScaleGroup, ...], rtol: float) -> bool:
    """Some group's factor is not 1: a rescaled update, not the global batch's by a hair."""
    return any(not _near(g.factor, 1.0, rtol) for g in groups)


def _near(x: float, y: float, rtol: float) -> bool:
    return math.isclose(x, y, rel_tol=rtol, abs_tol=rtol)


def _gap(change: Vectors, grad: Vectors) -> float:
    """|delta + g| / max(|delta|, |g|): 0 for the same step, up to 2 for the opposite one."""
    scale = max(_norm(change), _norm(grad))
    return 0.0 if scale == 0 else _norm(_flat(change) + _flat(grad)) / scale


def _coinciding(grads: dict[str, Vectors], rtol: float) -> tuple[tuple[str, ...], ...]:
    """Groups (of 2 or more) of candidates whose gradients are within rtol of the group's
    first member, in NAMED_SCHEMES order."""
    groups: list[list[str]] = []
    for s in grads:
        home = next((g for g in groups if _gap(_negated(grads[g[0]]), grads[s]) <= rtol), None)
        if home is None:
            groups.append([s])
        else:
            home.append(s)
    return tuple(tuple(g) for g in groups if len(g) > 1)


def _groups(scales: dict[str, float | None], rtol: float) -> tuple[ScaleGroup, ...]:
    """The defined per-parameter factors clustered within rtol, smallest factor first; the
    names of a group in the parameters' order."""
    order = {name: i for i, name in enumerate(scales)}
    found: list[tuple[float, list[str]]] = []
    for name, c in sorted(((n, c) for n, c in scales.items() if c is not None), key=lambda x: x[1]):
        if found and _near(c, found[-1][0], rtol):
            found[-1][1].append(name)
        else:
            found.append((c, [name]))
    return tuple(ScaleGroup(c, tuple(sorted(names, key=order.__getitem__))) for c, names in found)


def _common_scale(change: Vectors, candidates: object) -> tuple[Vectors, dict[str, Vectors]]:
    """delta and the candidates checked, all divided by their largest |entry|: every gap,
    factor and residual is unchanged by a common scale, and no norm can overflow."""
    grads = _candidates(candidates, change)
    every = [change, *grads.values()]
    top = max(float(np.abs(x).max(initial=0.0)) for vectors in every for x in vectors.values())
    if top == 0:
        return change, grads
    scaled = [{n: x / top for n, x in vectors.items()} for vectors in every]
    return scaled[0], dict(zip(grads, scaled[1:]))


def _candidates(candidates: object, change: Vectors) -> dict[str, Vectors]:
    if not isinstance(candidates, Mapping) or REFERENCE not in candidates:
        raise v.InvalidInput("candidates", candidates, "non_empty", f"{REFERENCE} required")
    for s in candidates:
        v.choice(s, "candidates", NAMED_SCHEMES)
    return {
        s: _vectors(candidates[s], f"candidates[{s}]", change)
        for s in NAMED_SCHEMES
        if s in candidates
    }


def _vectors(values: object, field: str, like: Vectors | None) -> Vectors:
    """{name: flat float64 array}; with `like`, the same names and sizes as it."""
    if not isinstance(values, Mapping) or not values:
        raise v.InvalidInput(field, values, "non_empty", "{parameter name: values}")
    if like is not None and set(values) != set(like):
        raise v.InvalidInput(field, list(values), "same_shape", f"names {list(like)}")
    out = {}
    for name in like or values:
        x = values[name]
        x = x.detach().cpu() if hasattr(x, "detach") else x  # a torch tensor, duck-typed
        try:
            array = np.asarray(x, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError, OverflowError):
            raise v.InvalidInput(f"{field}[{name}]", values[name], "finite") from None
        if not np.isfinite(array).all():
            raise v.InvalidInput(f"{field}[{name}]", values[name], "finite")
        if like is not None and array.shape != like[name].shape:
            raise v.InvalidInput(f"{field}[{name}]", array.size, "same_shape", like[name].size)
        out[name] = array
    return out


def _flat(vectors: Vectors) -> np.ndarray:
    flat: np.ndarray = np.concatenate(list(vectors.values()))
    return flat


def _negated(vectors: Vectors) -> Vectors:
    return {n: -x for n, x in vectors.items()}


def _norm(x: np.ndarray | Vectors) -> float:
    """The Euclidean length, taken over the largest |entry| so that tiny entries do not
    underflow (|1e-200| is 1e-200, not 0)."""
    flat = _flat(x) if isinstance(x, dict) else x
    top = float(np.abs(flat).max(initial=0.0))
    return 0.0 if top == 0 else top * float(np.sqrt(np.sum((flat / top) ** 2)))
