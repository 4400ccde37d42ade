"""Framework semantics: which coefficient each local loss needs under a given collective.

A trainer hands each microbatch's loss to backward, times some coefficient c_rk. The
collective then averages (DDP's default, divides by P) or sums the replicas' gradients.
The update reproduces the global objective sum_rk G_rk / N exactly when

    mean collective:  c_rk = P / N          on the loss sum S_rk
                      c_rk = P n_rk / N     on the local mean S_rk / n_rk   (n_rk > 0)
    sum collective:   c_rk = 1 / N          on S_rk
                      c_rk = n_rk / N       on S_rk / n_rk

Two common slips are modelled beside it: dividing by the accumulation steps K again
although N already covers the window, and adding a regulariser lambda R(theta) on every
microstep instead of once per update. With weights, N becomes the weight sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from pclab.core import ledger
from pclab.core import validation as v

LOSS_INPUTS = ("sum", "local_mean")
REGULARISER_PLACEMENTS = ("once", "every_microstep")


@dataclass(frozen=True)
class FrameworkUpdate:
    coefficients: tuple[tuple[float | None, ...], ...]  # c_rk; None: empty local mean, no backward
    token_gradient: float | None  # what reaches the optimizer from the token loss
    regulariser_gradient: float  # what reaches it from lambda R
    regulariser_multiplier: int  # how many times lambda R' ended up in the update (correct: 1)
    applied_gradient: float | None
    reference_gradient: float | None  # sum G / N + lambda R'
    num_valid_labels: int
    skip: bool  # N = 0: nothing to normalise, every replica skips


def regulariser_multiplier(replicas: int, accum_steps: int, collective: str, placement: str) -> int:
    """Copies of lambda R' in the update.

    `once`: added on every replica in one microstep under a mean collective (the mean
    keeps one copy), or on one replica under a sum collective - either way 1.
    `every_microstep`: added unscaled in all K microsteps of all P replicas, so the mean
    keeps K copies and the sum P*K.
    """
    replicas = v.count(replicas, "replicas", minimum=1)
    accum_steps = v.count(accum_steps, "accum_steps", minimum=1)
    collective = v.choice(collective, "collective", ledger.COLLECTIVES)
    placement = v.choice(placement, "placement", REGULARISER_PLACEMENTS)
    if placement == "once":
        return 1
    return accum_steps if collective == "mean" else replicas * accum_steps


def framework_update(
    grad_sums: object,
    counts: object,
    collective: str = "mean",
    loss_input: str = "sum",
    divide_by_accum: bool = False,
    reg_grad: float = 0.0,
    reg_placement: str = "once",
) -> FrameworkUpdate:
    """Follow one update through backward and the collective, and compare with the objective.

    Args:
        grad_sums, counts: [replica][microstep] gradient sums G_rk and valid counts n_rk.
        collective: "mean" (divide by P) or "sum".
        loss_input: what the trainer back-propagates per microbatch: the loss "sum" S_rk
            or its "local_mean" S_rk / n_rk.
        divide_by_accum: also divide every local loss by K (the double-scaling slip).
        reg_grad: lambda R'(theta), the regulariser's gradient for the whole update.
        reg_placement: "once" or "every_microstep".
    """
    grid = v.count_grid(counts)
    replicas, steps = len(grid), len(grid[0])
    sums = v.finite_grid(grad_sums, "grad_sums", (replicas, steps))
    loss_input = v.choice(loss_input, "loss_input", LOSS_INPUTS)
    reg_grad = v.finite(reg_grad, "reg_grad")
    multiplier = regulariser_multiplier(replicas, steps, collective, reg_placement)
    scale = ledger.local_loss_scale(grid, collective)
    n = sum(map(sum, grid))
    reg_applied = multiplier * reg_grad
    if scale is None:
        empty = tuple(tuple(None for _ in row) for row in grid)
        return FrameworkUpdate(empty, None, reg_applied, multiplier, None, None, 0, True)

    extra = 1 / steps if divide_by_accum else 1.0
    reduce = 1 / replicas if collective == "mean" else 1.0

    def coefficient(count: int) -> float | None:
        if loss_input == "sum":
            return scale * extra
        return scale * count * extra if count else None  # no local mean to back-propagate

    coefficients = tuple(tuple(coefficient(c) for c in row) for row in grid)
    # Backward of c * (local loss) gives c * G_rk for a sum, c * G_rk / n_rk for a mean.
    token_gradient = reduce * sum(
        c * (g if loss_input == "sum" else g / count)
        for c_row, g_row, n_row in zip(coefficients, sums, grid)
        for c, g, count in zip(c_row, g_row, n_row)
        if c is not None
    )
    reference = sum(map(sum, sums)) / n + reg_grad
    return FrameworkUpdate(
        coefficients=coefficients,
        token_gradient=token_gradient,
        regulariser_gradient=reg_applied,
        regulariser_multiplier=multiplier,
        applied_gradient=token_gradient + reg_applied,
        reference_gradient=reference,
        num_valid_labels=n,
        skip=False,
    )


def weighted_loss_scale(weight_sums: object, collective: str = "mean") -> float | None:
    """The P/N coefficient when labels carry class or sample weights: N becomes sum w.

    `weight_sums` is the [replica][microstep] grid of each microbatch's weight total.
    Returns `None` when the total weight is 0 (no objective).
    """
    cells = v.grid(weight_sums, "weight_sums")
    totals = [
        [v.non_negative(w, "weight_sums", (r, k)) for k, w in enumerate(row)]
        for r, row in enumerate(cells)
    ]
    collective = v.choice(collective, "collective", ledger.COLLECTIVES)
    total = sum(map(sum, totals))
    if total == 0:
        return None
    # A subnormal total weight (5e-324) would make the coefficient inf: refused, never shown.
    scale = (len(totals) if collective == "mean" else 1) / total
    return v.finite_result(scale, "weight_sums", weight_sums)
