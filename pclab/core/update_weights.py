"""Which weight each microbatch really got: a measured update, solved for its weights.

A training step over P replicas x K microsteps that applies sum_rk w_rk G_rk with plain SGD
at learning rate 1 moves the parameters by

    delta = - sum_rk w_rk g_rk,

where g_rk is the gradient of microbatch (r, k)'s summed token losses at the initial
weights. Given the measured delta and every g_rk, least squares recovers w; the lab reports
w_rk x N, which is 1 in every cell for the global token mean (the objective
sum of all token losses / N). Named schemes predict other grids (core.ledger's, plus the
unnormalised sum):

    global_token      1
    replica_mean      N / (P n_r)       DDP's mean of local means
    microbatch_mean   N / (P K n_rk)    every microbatch counted equally
    double_scaled     1 / K             global N, then / K again
    unnormalised_sum  N / P             token sums, averaged over replicas

A causal LM loses each label at a sequence's position 0 to its shift, so a microbatch with
l_rk labels placed holds t_rk <= l_rk terms (N = sum t_rk). One more scheme needs both:

    labels_before_shift  (l_rk / t_rk) (N / L)   torchtune's form: each microbatch's mean
                         over its terms times its label count taken before the shift, summed
                         and divided by the global pre-shift count L = sum l_rk

With no shift (l = t) it is the global token mean, so it is only told when `labels` is given.
A microbatch without labels has g_rk = 0: its weight is undefined (None), never 0.

    >>> scheme_weights_times_n([[2, 8]], "microbatch_mean")
    ((2.5, 0.625),)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pclab.core import ledger
from pclab.core import validation as v

NAMED_SCHEMES = (*ledger.SCHEMES, "unnormalised_sum")
SHIFT_SCHEMES = ("labels_before_shift",)  # need the labels placed as well as the terms
SCHEME_RTOL = 1e-6  # a measured grid matches a named scheme within this relative gap

WeightGrid = ledger.WeightGrid
MeasuredGrid = Sequence[Sequence[float | None]]  # [replica][microstep] w_rk x N, None: undefined


def scheme_weights_times_n(counts: object, scheme: str, labels: object = None) -> WeightGrid:
    """The w_rk x N grid `scheme` predicts for these counts (None where undefined: an empty
    microbatch, a mean over an empty replica, or N = 0); `labels`: the labels placed per
    microbatch before a causal shift (default: the counts, no shift)."""
    grid = v.count_grid(counts)
    scheme = v.choice(scheme, "scheme", (*NAMED_SCHEMES, *SHIFT_SCHEMES))
    n = sum(map(sum, grid))
    weights: WeightGrid
    if scheme == "labels_before_shift":
        weights = _labels_before_shift(grid, grid if labels is None else v.count_grid(labels))
    elif scheme == "unnormalised_sum":
        weights = tuple(tuple(1 / len(grid) for _ in row) for row in grid)
    else:
        weights = ledger.microbatch_weights(grid, scheme)
    return tuple(
        tuple(None if w is None or c == 0 or n == 0 else w * n for w, c in zip(w_row, c_row))
        for w_row, c_row in zip(weights, grid)
    )


def _labels_before_shift(
    terms: tuple[tuple[int, ...], ...], labels: tuple[tuple[int, ...], ...]
) -> WeightGrid:
    """w_rk = l_rk / (t_rk L): a mean over the t_rk terms, times l_rk, over L = sum l."""
    if len(labels) != len(terms) or any(len(a) != len(b) for a, b in zip(labels, terms)):
        raise v.InvalidInput("labels", labels, "same_shape", "the counts' shape")
    if any(lab < t for l_row, t_row in zip(labels, terms) for lab, t in zip(l_row, t_row)):
        raise v.InvalidInput("labels", labels, "in_range", "at least the terms in every cell")
    total = sum(map(sum, labels))
    return tuple(
        tuple(None if t == 0 else lab / (t * total) for lab, t in zip(l_row, t_row))
        for l_row, t_row in zip(labels, terms)
    )


@dataclass(frozen=True)
class WeightSolve:
    """weights_times_n: the P x K grid of w_rk x N (None: no labels, or not identifiable);
    residual: |delta + sum w g| / |delta| (None when delta = 0); identifiable: the non-empty
    microbatches' gradients are linearly independent, so the weights are unique."""

    weights_times_n: WeightGrid
    residual: float | None
    identifiable: bool


def solve_weights(grads: object, delta: object, counts: object) -> WeightSolve:
    """Solve delta = - sum_rk w_rk g_rk for w by least squares.

    Args:
        grads: P x K nested list of flat gradient vectors g_rk (all of length D), the
            gradient of microbatch (r, k)'s summed token losses at the initial weights.
        delta: the flat parameter change (length D) of one SGD step at learning rate 1.
        counts: P x K valid-label counts n_rk (whole numbers >= 0).
    Returns:
        WeightSolve. Cells of microbatches without labels are None; so is every cell when
        the non-empty microbatches' gradients are linearly dependent (not identifiable).
    Raises:
        ValueError naming the value for ragged shapes, non-finite numbers or bad counts.
    """
    grid = v.count_grid(counts)
    shape = (len(grid), len(grid[0]))
    if not isinstance(grads, list | tuple) or len(grads) != shape[0]:
        raise v.InvalidInput("grads", grads, "same_shape", f"{shape[0]} rows of {shape[1]}")
    change = _vector(delta, "delta")
    cells = [(r, k) for r in range(shape[0]) for k in range(shape[1]) if grid[r][k] > 0]
    columns = []
    for r, row in enumerate(grads):
        if not isinstance(row, list | tuple) or len(row) != shape[1]:
            raise v.InvalidInput("grads", row, "same_shape", f"{shape[1]} vectors", cell=(r,))
        for k, g in enumerate(row):
            vector = _vector(g, f"grads[{r}][{k}]")
            if vector.shape != change.shape:
                raise v.InvalidInput("grads", len(vector), "same_shape", len(change), cell=(r, k))
            if (r, k) in cells:
                columns.append(vector)
    n = sum(map(sum, grid))
    empty = tuple(tuple(None for _ in row) for row in grid)
    size = float(np.linalg.norm(change))
    if not cells:
        return WeightSolve(empty, None if size == 0 else 1.0, True)
    matrix = -np.stack(columns, axis=1)  # D x M: delta = matrix @ w
    w, _, rank, _ = np.linalg.lstsq(matrix, change, rcond=None)
    identifiable = int(rank) == len(cells)
    misfit = float(np.linalg.norm(matrix @ w - change))
    residual = None if size == 0 else misfit / size
    if not identifiable:
        return WeightSolve(empty, residual, False)
    solved = {cell: float(x) * n for cell, x in zip(cells, w)}
    weights = tuple(tuple(solved.get((r, k)) for k in range(shape[1])) for r in range(shape[0]))
    return WeightSolve(weights, residual, True)


def matching_schemes(
    weights_times_n: MeasuredGrid, counts: object, rtol: float = SCHEME_RTOL, labels: object = None
) -> tuple[str, ...]:
    """Every named scheme (in NAMED_SCHEMES order: the correct one first, then SHIFT_SCHEMES
    when `labels` is given) whose predicted grid matches each measured cell within `rtol`
    (None where the prediction is None). Some counts cannot tell schemes apart: equal counts
    make them all 1."""
    grid = v.count_grid(counts)
    rtol = v.non_negative(rtol, "rtol")
    measured = [x for row in weights_times_n for x in row]
    if len(weights_times_n) != len(grid) or len(measured) != len(grid) * len(grid[0]):
        raise v.InvalidInput("weights_times_n", weights_times_n, "same_shape", "counts' shape")
    if all(x is None for x in measured):
        return ()
    found = []
    for scheme in (*NAMED_SCHEMES, *(SHIFT_SCHEMES if labels is not None else ())):
        predicted = [x for row in scheme_weights_times_n(grid, scheme, labels) for x in row]
        if all(_cell_matches(got, want, rtol) for got, want in zip(measured, predicted)):
            found.append(scheme)
    return tuple(found)


def _cell_matches(got: float | None, want: float | None, rtol: float) -> bool:
    """Both undefined, or both numbers within `rtol`."""
    if got is None or want is None:
        return got is None and want is None
    return math.isclose(got, want, rel_tol=rtol, abs_tol=rtol)


def closest_scheme(
    weights_times_n: MeasuredGrid, counts: object, rtol: float = SCHEME_RTOL, labels: object = None
) -> str:
    """The first of `matching_schemes` (the correct one when it matches), else "other"."""
    return (matching_schemes(weights_times_n, counts, rtol, labels) or ("other",))[0]


def uniform_scale(weights_times_n: MeasuredGrid, rtol: float = SCHEME_RTOL) -> float | None:
    """The one value c every defined cell of a measured grid shares (within `rtol`), when
    c != 1 (also within `rtol`); else None. A uniform c with a small residual is a right
    normalisation scaled once: clipping, the learning rate or a factor in the loss.

        >>> uniform_scale([[0.5, 0.5], [0.5, None]])
        0.5
    """
    rtol = v.non_negative(rtol, "rtol")
    cells = [x for row in weights_times_n for x in row if x is not None]
    if not cells:
        return None
    c = sum(cells) / len(cells)
    same = all(math.isclose(x, c, rel_tol=rtol, abs_tol=rtol) for x in cells)
    return c if same and not math.isclose(c, 1.0, rel_tol=rtol, abs_tol=rtol) else None


@dataclass(frozen=True)
class Evidence:
    """What passing one count pattern proves. untold: the named schemes that give these
    counts the global token mean's weights although they differ from it at this P x K (so
    a pass cannot rule them out); split: P x K >= 2 (with one microbatch nothing is split,
    and every splitting mistake is the global token mean); evidence: N > 0, split, and
    nothing untold."""

    untold: tuple[str, ...]
    split: bool
    evidence: bool


def evidence(counts: object, rtol: float = SCHEME_RTOL, labels: object = None) -> Evidence:
    """Which named schemes these counts cannot tell from the global token mean; with `labels`
    (a trainer that shifts), also labels_before_shift where l_rk / t_rk is one value.

    A scheme that predicts weight x N = 1 on a probe grid of distinct counts 2, 3, ... of
    the same shape is the global token mean itself at that shape (replica_mean at P = 1,
    double_scaled at K = 1), not a scheme left untold.

        >>> evidence([[8, 8], [8, 8]]).untold
        ('replica_mean', 'microbatch_mean')
    """
    grid = v.count_grid(counts)
    p, k = len(grid), len(grid[0])
    probe = [[2 + r * k + j for j in range(k)] for r in range(p)]
    alike = matching_schemes(scheme_weights_times_n(grid, "global_token"), grid, rtol, labels)
    untold = [
        scheme
        for scheme in NAMED_SCHEMES[1:]
        if scheme in alike and not _all_ones(scheme_weights_times_n(probe, scheme), rtol)
    ]
    untold += [s for s in SHIFT_SCHEMES if s in alike and labels is not None]
    n = sum(map(sum, grid))
    split = p * k >= 2
    return Evidence(tuple(untold), split, bool(n) and split and not untold)


def _all_ones(grid: MeasuredGrid, rtol: float) -> bool:
    return all(math.isclose(x, 1.0, rel_tol=rtol) for row in grid for x in row if x is not None)


def _vector(values: object, field: str) -> np.ndarray:
    try:
        array: np.ndarray = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise v.InvalidInput(field, values, "finite") from None
    if array.ndim != 1 or not np.isfinite(array).all():
        raise v.InvalidInput(field, values, "finite")
    return array
