"""The denominator ledger: how one update's gradient is averaged over replicas and microsteps.

P data-parallel replicas each run K accumulation microsteps. Microbatch (r, k) has
n_rk valid labels, a loss sum S_rk and a gradient sum G_rk. The update's objective is the
global token mean

    L = sum_rk S_rk / N,   N = sum_rk n_rk,   defined only when N > 0,

so the correct gradient is sum_rk G_rk / N. Real trainers have shipped other averages;
`reduce_gradient` computes each of them so a page or a notebook can compare.

    >>> reduce_gradient([[-4.0], [8.0]], [[2], [8]], "global_token")
    0.4
"""

from __future__ import annotations

from dataclasses import dataclass

from pclab.core import validation as v

SCHEMES = ("global_token", "replica_mean", "microbatch_mean", "double_scaled")
CORRECT_SCHEME = "global_token"
COLLECTIVES = ("mean", "sum")

Grid = tuple[tuple[int, ...], ...]
WeightGrid = tuple[tuple[float | None, ...], ...]


def global_count(counts: object) -> int:
    """N = sum over replicas and microsteps of n_rk (valid labels only)."""
    return sum(map(sum, v.count_grid(counts)))


def global_loss(loss_sums: object, counts: object) -> float | None:
    """The update's objective sum S_rk / N; `None` when N = 0 (there is nothing to average)."""
    grid = v.count_grid(counts)
    sums = v.finite_grid(loss_sums, "loss_sums", (len(grid), len(grid[0])))
    n = sum(map(sum, grid))
    return None if n == 0 else v.finite_result(sum(map(sum, sums)) / n, "loss_sums", loss_sums)


def microbatch_weights(counts: object, scheme: str) -> WeightGrid:
    """The weight w_rk each scheme puts on microbatch (r, k)'s gradient sum G_rk.

    The applied gradient is sum_rk w_rk G_rk, so w_rk is the weight of one token:
        global_token     1 / N
        replica_mean     1 / (P n_r),      n_r = sum_k n_rk    (DDP's mean of local means)
        microbatch_mean  1 / (P K n_rk)                      (every microbatch counted equally)
        double_scaled    1 / (N K)                           (global N, then / K again)
    A cell is `None` where the scheme divides by an empty count: that local mean is
    undefined, and treating it as 0 would hide the bug the table is there to show.
    """
    grid = v.count_grid(counts)
    scheme = v.choice(scheme, "scheme", SCHEMES)
    replicas, steps = len(grid), len(grid[0])
    n = sum(map(sum, grid))

    def weight(r: int, k: int) -> float | None:
        if scheme == "global_token":
            return 1 / n if n else None
        if scheme == "double_scaled":
            return 1 / (n * steps) if n else None
        if scheme == "replica_mean":
            replica_count = sum(grid[r])
            return 1 / (replicas * replica_count) if replica_count else None
        return 1 / (replicas * steps * grid[r][k]) if grid[r][k] else None

    return tuple(tuple(weight(r, k) for k in range(steps)) for r in range(replicas))


def update_shares(counts: object, scheme: str) -> WeightGrid:
    """Fraction of the update each microbatch carries: w_rk * n_rk (correct: n_rk / N)."""
    grid = v.count_grid(counts)
    weights = microbatch_weights(grid, scheme)
    return tuple(
        tuple(None if w is None else w * n for w, n in zip(w_row, n_row))
        for w_row, n_row in zip(weights, grid)
    )


def reduce_gradient(grad_sums: object, counts: object, scheme: str) -> float | None:
    """The gradient an update applies under `scheme`: sum_rk w_rk G_rk.

    Args:
        grad_sums: nested [replica][microstep] gradient sums G_rk (finite floats).
        counts: nested [replica][microstep] valid-label counts n_rk (whole numbers >= 0),
            the same rectangular shape.
        scheme: one of SCHEMES; `global_token` is the correct one.
    Returns:
        The gradient, or `None` when it is undefined: N = 0 (no objective, every scheme
        skips) or the scheme takes a mean over an empty replica or microbatch.
    Raises:
        ValueError naming the value for ragged grids, bad counts, non-finite sums or an
        unknown scheme.
    """
    grid = v.count_grid(counts)
    sums = v.finite_grid(grad_sums, "grad_sums", (len(grid), len(grid[0])))
    weights = microbatch_weights(grid, scheme)
    terms = [
        w * g for w_row, g_row in zip(weights, sums) for w, g in zip(w_row, g_row) if w is not None
    ]
    if any(w is None for row in weights for w in row):
        return None
    total = sum(terms)
    return v.finite_result(total, "grad_sums", grad_sums)


def local_loss_scale(counts: object, collective: str = "mean") -> float | None:
    """Coefficient on each local loss sum S_rk so the collective reproduces the global mean.

    With a mean collective (DDP's default) the P replicas' gradients are divided by P, so
    each local sum is scaled by P / N; with a sum collective by 1 / N:

        (1/P) sum_r sum_k grad(P/N * S_rk) = (1/N) sum_rk G_rk.

    Returns `None` when N = 0: there is no objective, and the update is a coordinated skip.
    """
    grid = v.count_grid(counts)
    collective = v.choice(collective, "collective", COLLECTIVES)
    n = sum(map(sum, grid))
    if n == 0:
        return None
    return (len(grid) if collective == "mean" else 1) / n


def sgd_step(theta: float, gradient: float, lr: float) -> float:
    """theta - lr * gradient: plain SGD without momentum or weight decay."""
    theta_after = v.finite(theta, "theta") - v.finite(lr, "lr") * v.finite(gradient, "gradient")
    return v.finite_result(theta_after, "theta", theta)


@dataclass(frozen=True)
class QuadraticLedger:
    """Section 02's panel: one scalar parameter, per-token loss 1/2 (theta - target_r)^2."""

    counts: tuple[int, ...]
    targets: tuple[float, ...]
    per_token_grads: tuple[float, ...]  # theta - target_r
    grad_sums: tuple[float, ...]  # n_r * (theta - target_r)
    correct_shares: tuple[float | None, ...]  # n_r / N
    num_valid_labels: int
    global_loss: float | None
    gradients: dict[str, float | None]  # scheme -> applied gradient (None: undefined)
    theta_after: dict[str, float | None]  # scheme -> theta after one SGD step
    reversed: dict[
        str, bool | None
    ]  # scheme -> points against the correct gradient (None: undefined)
    skip: bool  # N = 0: every replica skips together, theta unchanged


def quadratic_ledger(
    counts: object, targets: object, theta: float = 0.0, lr: float = 0.1
) -> QuadraticLedger:
    """Replicas with one microbatch each and a quadratic per-token loss.

    Replica r has n_r tokens, each with loss 1/2 (theta - target_r)^2, so its gradient
    sum is G_r = n_r (theta - target_r). Seed defaults: n = (2, 8), targets (2, -1),
    theta = 0, lr = 0.1 give the correct gradient +0.4 and the replica mean -0.5.
    """
    if not isinstance(counts, (list, tuple)):
        raise v.InvalidInput("counts", counts, "non_empty")
    grid = v.count_grid([[c] for c in counts])
    if not isinstance(targets, (list, tuple)) or len(targets) != len(grid):
        raise v.InvalidInput("targets", targets, "same_shape", f"{len(grid)} values")
    target_values = tuple(v.finite(t, "targets", (i,)) for i, t in enumerate(targets))
    theta, lr = v.finite(theta, "theta"), v.finite(lr, "lr")
    per_token = tuple(theta - t for t in target_values)
    grad_sums = tuple(row[0] * g for row, g in zip(grid, per_token))
    loss_sums = [
        [v.finite_result(row[0] * 0.5 * g * g, "theta - targets", per_token)]
        for row, g in zip(grid, per_token)
    ]
    n = sum(row[0] for row in grid)
    gradients = {s: reduce_gradient([[g] for g in grad_sums], grid, s) for s in SCHEMES}
    skip = n == 0
    theta_after = {
        s: theta if skip else (None if g is None else sgd_step(theta, g, lr))
        for s, g in gradients.items()
    }
    correct = gradients[CORRECT_SCHEME]
    reversed_by = {
        s: None if g is None or correct is None else g * correct < 0 for s, g in gradients.items()
    }
    return QuadraticLedger(
        counts=tuple(row[0] for row in grid),
        targets=target_values,
        per_token_grads=per_token,
        grad_sums=grad_sums,
        correct_shares=tuple(row[0] for row in update_shares(grid, CORRECT_SCHEME)),
        num_valid_labels=n,
        global_loss=global_loss(loss_sums, grid),
        gradients=gradients,
        theta_after=theta_after,
        reversed=reversed_by,
        skip=skip,
    )


def split_sweep(
    total: int, targets: object, theta: float = 0.0
) -> list[dict[str, float | int | None]]:
    """Two replicas sharing `total` tokens: each scheme's gradient for every split n_A + n_B.

    Each row holds n_a, every scheme's gradient (None where undefined) and
    `<scheme>_reversed`: True where that gradient points the other way from the correct one.
    """
    total = v.count(total, "total", minimum=1)
    if total > 10_000:
        raise v.InvalidInput("total", total, "in_range", "1..10000")
    rows = []
    for n_a in range(total + 1):
        split = quadratic_ledger((n_a, total - n_a), targets, theta)
        rows.append(
            {
                "n_a": n_a,
                **split.gradients,
                **{f"{s}_reversed": r for s, r in split.reversed.items()},
            }
        )
    return rows
