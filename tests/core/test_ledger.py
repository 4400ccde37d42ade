"""core.ledger against torch autograd in float64 on real per-token losses.

The reference never reuses the ledger's weights: it builds every replica's and
microbatch's tokens, takes the means the way each trainer does (`.mean()` over the
tokens it holds), and lets autograd produce the gradient.
"""

import math
import random
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pclab.core import ledger

torch.set_default_dtype(torch.float64)


def make_batch(counts, seed):
    """Per-token losses softplus(a*theta + b) for every microbatch, theta at 0.3."""
    gen = torch.Generator().manual_seed(seed)
    theta = torch.tensor(0.3, requires_grad=True)
    tokens = [
        [(torch.randn(n, generator=gen), torch.randn(n, generator=gen)) for n in row]
        for row in counts
    ]

    def losses(r, k):
        a, b = tokens[r][k]
        return torch.nn.functional.softplus(a * theta + b)

    return theta, losses


def grad_of(theta, loss):
    (g,) = torch.autograd.grad(loss, theta)
    return g.item()


def sums_from_autograd(counts, theta, losses):
    grad_sums = [
        [grad_of(theta, losses(r, k).sum()) for k in range(len(row))]
        for r, row in enumerate(counts)
    ]
    loss_sums = [
        [losses(r, k).sum().item() for k in range(len(row))] for r, row in enumerate(counts)
    ]
    return grad_sums, loss_sums


def reference_gradient(counts, theta, losses, scheme):
    """What each trainer actually back-propagates, built from token tensors."""
    cells = [[losses(r, k) for k in range(len(row))] for r, row in enumerate(counts)]
    every_token = torch.cat([c for row in cells for c in row])
    steps = len(counts[0])
    if scheme == "global_token":
        return grad_of(theta, every_token.mean())
    if scheme == "double_scaled":
        return grad_of(theta, every_token.mean() / steps)
    if scheme == "replica_mean":
        return grad_of(theta, torch.stack([torch.cat(row).mean() for row in cells]).mean())
    return grad_of(theta, torch.stack([c.mean() for row in cells for c in row]).mean())


UNEQUAL = [[3, 0, 5], [1, 7, 2]]


@pytest.mark.parametrize("scheme", ledger.SCHEMES)
def test_reduce_gradient_matches_autograd(scheme):
    counts = [[3, 4, 5], [1, 7, 2]]
    theta, losses = make_batch(counts, seed=1)
    grad_sums, _ = sums_from_autograd(counts, theta, losses)
    got = ledger.reduce_gradient(grad_sums, counts, scheme)
    assert got == pytest.approx(reference_gradient(counts, theta, losses, scheme), abs=1e-12)


def test_wrong_schemes_differ_from_correct_on_unequal_counts():
    counts = [[3, 4, 5], [1, 7, 2]]
    theta, losses = make_batch(counts, seed=1)
    grad_sums, _ = sums_from_autograd(counts, theta, losses)
    correct = ledger.reduce_gradient(grad_sums, counts, "global_token")
    for scheme in ("replica_mean", "microbatch_mean", "double_scaled"):
        assert abs(ledger.reduce_gradient(grad_sums, counts, scheme) - correct) > 1e-3


def test_empty_microbatch_makes_local_means_undefined_not_zero():
    theta, losses = make_batch(UNEQUAL, seed=2)
    grad_sums, loss_sums = sums_from_autograd(UNEQUAL, theta, losses)
    assert ledger.reduce_gradient(grad_sums, UNEQUAL, "microbatch_mean") is None
    # The replica mean is still defined: each replica holds tokens somewhere in its window.
    assert ledger.reduce_gradient(grad_sums, UNEQUAL, "replica_mean") == pytest.approx(
        reference_gradient(UNEQUAL, theta, losses, "replica_mean"), abs=1e-12
    )
    assert ledger.global_loss(loss_sums, UNEQUAL) == pytest.approx(
        torch.cat([losses(r, k) for r in range(2) for k in range(3)]).mean().item(), abs=1e-12
    )


def test_empty_replica_and_zero_n():
    counts = [[0, 0], [2, 3]]
    assert ledger.reduce_gradient([[0.0, 0.0], [1.0, 2.0]], counts, "replica_mean") is None
    assert ledger.reduce_gradient(
        [[0.0, 0.0], [1.0, 2.0]], counts, "global_token"
    ) == pytest.approx(3 / 5)
    zero = [[0, 0], [0, 0]]
    for scheme in ledger.SCHEMES:
        assert ledger.reduce_gradient([[0.0, 0.0], [0.0, 0.0]], zero, scheme) is None
    assert ledger.global_loss([[0.0, 0.0], [0.0, 0.0]], zero) is None
    assert ledger.local_loss_scale(zero) is None
    assert ledger.local_loss_scale(zero, "sum") is None


@pytest.mark.parametrize("collective", ledger.COLLECTIVES)
def test_local_loss_scale_reproduces_global_objective_through_the_collective(collective):
    """Simulate DDP: each replica back-propagates scale * sum_k S_rk; the collective
    averages (or sums) the replicas' gradients; compare with the global token mean."""
    counts = [[3, 0, 5], [1, 7, 2], [4, 4, 0]]
    theta, losses = make_batch(counts, seed=3)
    scale = ledger.local_loss_scale(counts, collective)
    replica_grads = [
        grad_of(theta, scale * torch.stack([losses(r, k).sum() for k in range(3)]).sum())
        for r in range(3)
    ]
    reduced = sum(replica_grads) / (len(counts) if collective == "mean" else 1)
    assert reduced == pytest.approx(
        reference_gradient(counts, theta, losses, "global_token"), abs=1e-12
    )


def test_microbatch_weights_closed_forms():
    counts = [[2, 0], [1, 7]]
    assert ledger.microbatch_weights(counts, "global_token") == ((0.1, 0.1), (0.1, 0.1))
    assert ledger.microbatch_weights(counts, "double_scaled") == ((0.05, 0.05), (0.05, 0.05))
    assert ledger.microbatch_weights(counts, "replica_mean") == ((0.25, 0.25), (1 / 16, 1 / 16))
    assert ledger.microbatch_weights(counts, "microbatch_mean") == ((1 / 8, None), (1 / 4, 1 / 28))
    shares = ledger.update_shares(counts, "global_token")
    assert [x for row in shares for x in row] == pytest.approx([0.2, 0.0, 0.1, 0.7], abs=1e-15)


def test_seed_two_replica_ledger():
    """Seed section 02: n_A=2, n_B=8, targets 2 and -1, theta=0, eta=0.1."""
    result = ledger.quadratic_ledger((2, 8), (2, -1), theta=0.0, lr=0.1)
    assert result.per_token_grads == (-2.0, 1.0)
    assert result.gradients["global_token"] == pytest.approx(0.4, abs=1e-15)
    assert result.gradients["replica_mean"] == pytest.approx(-0.5, abs=1e-15)
    assert result.theta_after["global_token"] == pytest.approx(-0.04, abs=1e-15)
    assert result.theta_after["replica_mean"] == pytest.approx(0.05, abs=1e-15)
    assert result.correct_shares == (0.2, 0.8)
    # loss: (2 * 1/2 * 4 + 8 * 1/2 * 1) / 10
    assert result.global_loss == pytest.approx(0.8, abs=1e-15)
    assert not result.skip


def test_quadratic_ledger_against_autograd():
    counts, targets, theta0 = (3, 5, 1), (0.5, -2.0, 4.0), 0.7
    theta = torch.tensor(theta0, requires_grad=True)
    tokens = torch.cat([torch.full((n,), c) for n, c in zip(counts, targets)])
    loss = (0.5 * (theta - tokens) ** 2).mean()
    result = ledger.quadratic_ledger(counts, targets, theta0, lr=0.2)
    assert result.global_loss == pytest.approx(loss.item(), abs=1e-12)
    assert result.gradients["global_token"] == pytest.approx(grad_of(theta, loss), abs=1e-12)


def test_quadratic_ledger_empty_replica_and_skip():
    empty = ledger.quadratic_ledger((0, 8), (2, -1))
    assert empty.gradients["replica_mean"] is None
    assert empty.theta_after["replica_mean"] is None
    assert empty.gradients["global_token"] == pytest.approx(1.0)
    skip = ledger.quadratic_ledger((0, 0), (2, -1), theta=0.5)
    assert skip.skip and skip.global_loss is None
    assert all(g is None for g in skip.gradients.values())
    assert all(t == 0.5 for t in skip.theta_after.values())


def test_split_sweep_finds_the_reversal():
    rows = ledger.split_sweep(10, (2, -1))
    assert len(rows) == 11
    seed_row = rows[2]
    assert seed_row["global_token"] == pytest.approx(0.4) and seed_row[
        "replica_mean"
    ] == pytest.approx(-0.5)
    assert rows[0]["replica_mean"] is None and rows[10]["replica_mean"] is None
    # correct gradient 1 - 3 n_A / 10 > 0 for n_A <= 3, replica mean -1/2 < 0 wherever defined
    assert [r["n_a"] for r in rows if r["replica_mean_reversed"]] == [1, 2, 3]
    assert rows[0]["replica_mean_reversed"] is None
    assert not any(r["global_token_reversed"] for r in rows)


# ---- properties ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    token_values=st.lists(st.floats(-100, 100), min_size=1, max_size=40),
    replicas=st.integers(1, 4),
    steps=st.integers(1, 4),
    seed=st.integers(0, 10_000),
)
def test_global_objective_does_not_depend_on_the_split(token_values, replicas, steps, seed):
    rng = random.Random(seed)
    cells = [[[] for _ in range(steps)] for _ in range(replicas)]
    for value in token_values:
        cells[rng.randrange(replicas)][rng.randrange(steps)].append(value)
    counts = [[len(c) for c in row] for row in cells]
    sums = [[math.fsum(c) for c in row] for row in cells]
    expected = math.fsum(token_values) / len(token_values)
    assert ledger.global_loss(sums, counts) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert ledger.reduce_gradient(sums, counts, "global_token") == pytest.approx(
        expected, rel=1e-12, abs=1e-12
    )


@settings(max_examples=300, deadline=None)
@given(
    replicas=st.integers(1, 5),
    steps=st.integers(1, 4),
    per_replica=st.integers(1, 20),
    data=st.data(),
)
def test_replica_mean_equals_global_when_replica_counts_are_equal(
    replicas, steps, per_replica, data
):
    counts = []
    for _ in range(replicas):
        cuts = sorted(
            data.draw(st.lists(st.integers(0, per_replica), min_size=steps - 1, max_size=steps - 1))
        )
        bounds = [0, *cuts, per_replica]
        counts.append([bounds[i + 1] - bounds[i] for i in range(steps)])
    sums = data.draw(
        st.lists(
            st.lists(st.floats(-1e3, 1e3), min_size=steps, max_size=steps),
            min_size=replicas,
            max_size=replicas,
        )
    )
    correct = ledger.reduce_gradient(sums, counts, "global_token")
    assert ledger.reduce_gradient(sums, counts, "replica_mean") == pytest.approx(
        correct, rel=1e-9, abs=1e-9
    )


# ---- input errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grad_sums", "counts", "scheme", "named"),
    [
        ([[1.0], [1.0, 2.0]], [[1], [1, 2]], "global_token", "counts"),  # ragged
        ([[1.0]], [[-1]], "global_token", "counts[0][0]"),
        ([[1.0]], [[2.5]], "global_token", "counts[0][0]"),
        ([[1.0]], [[float("nan")]], "global_token", "counts[0][0]"),
        ([[float("nan")]], [[1]], "global_token", "grad_sums[0][0]"),
        ([[float("inf")]], [[1]], "global_token", "grad_sums[0][0]"),
        ([[1.0]], [[1]], "token_mean", "scheme"),
        ([[1.0, 2.0]], [[1]], "global_token", "grad_sums"),  # shape mismatch
        ([], [], "global_token", "counts"),
        ([[]], [[]], "global_token", "counts"),
    ],
)
def test_reduce_gradient_rejects_bad_input_naming_the_value(grad_sums, counts, scheme, named):
    with pytest.raises(ValueError, match="^" + re.escape(named) + "="):
        ledger.reduce_gradient(grad_sums, counts, scheme)


def test_type_errors_and_collective():
    with pytest.raises(TypeError):
        ledger.reduce_gradient([[1.0]], [["two"]], "global_token")
    with pytest.raises(ValueError, match="^collective="):
        ledger.local_loss_scale([[1]], "max")
    with pytest.raises(ValueError, match="^targets="):
        ledger.quadratic_ledger((1, 2), (1,))
    with pytest.raises(ValueError, match="^lr="):
        ledger.quadratic_ledger((1, 2), (1, 2), lr=float("inf"))
    assert (
        ledger.reduce_gradient([[1.0]], [[2.0]], "global_token") == 0.5
    )  # 2.0 from a table is a count


def test_overflowing_results_are_refused_not_inf():
    # A reduced gradient is a weighted mean (weights sum to <= 1), so it cannot overflow;
    # the quadratic loss 1/2 (theta - target)^2 can.
    assert ledger.reduce_gradient([[1e308], [1e308]], [[1], [1]], "replica_mean") == 1e308
    with pytest.raises(ValueError, match="overflows float64"):
        ledger.quadratic_ledger((1, 1), (1e300, -1e300), theta=0.0)
