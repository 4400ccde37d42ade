"""core.update_weights against independent computations: closed forms for the named grids,
and real torch autograd updates (float64) solved back into the weights that made them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pclab.core import update_weights as uw
from pclab.core.validation import InvalidInput


def flat(grid):
    return [x for row in grid for x in row]


def test_named_grids_match_hand_computed_values():
    counts = [[3, 8], [8, 16]]  # N = 35, P = 2, K = 2, n_r = 11, 24
    assert uw.scheme_weights_times_n(counts, "global_token") == ((1.0, 1.0), (1.0, 1.0))
    rm = flat(uw.scheme_weights_times_n(counts, "replica_mean"))
    assert rm == pytest.approx([35 / 22, 35 / 22, 35 / 48, 35 / 48], rel=1e-15)
    mm = flat(uw.scheme_weights_times_n(counts, "microbatch_mean"))
    assert mm == pytest.approx([35 / 12, 35 / 32, 35 / 32, 35 / 64], rel=1e-15)
    assert flat(uw.scheme_weights_times_n(counts, "double_scaled")) == pytest.approx([0.5] * 4)
    assert uw.scheme_weights_times_n(counts, "unnormalised_sum") == ((17.5, 17.5), (17.5, 17.5))


def test_empty_cells_and_no_labels_are_undefined_not_zero():
    grid = uw.scheme_weights_times_n([[0, 4], [0, 0]], "replica_mean")
    assert grid == ((None, 0.5), (None, None))  # N / (P n_0) = 4 / (2 * 4)
    assert uw.scheme_weights_times_n([[0, 0]], "global_token") == ((None, None),)


def _grads_and_delta(counts, token_weight, seed=0):
    """A real model: per-token losses of a tiny float64 network; the update an SGD(lr=1)
    step makes when token t of microbatch (r, k) carries token_weight(r, k); and each
    microbatch's own gradient of its summed losses - all by torch autograd."""
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 4))
    model = model.double()
    for p in model.parameters():
        p.data = torch.randn(p.shape, generator=gen, dtype=torch.float64)
    batches = {
        (r, k): (
            torch.randn(n, 3, generator=gen, dtype=torch.float64),
            torch.randint(0, 4, (n,), generator=gen),
        )
        for r, row in enumerate(counts)
        for k, n in enumerate(row)
    }

    def summed(x, y):
        return torch.nn.functional.cross_entropy(model(x), y, reduction="sum")

    def flat_grad(loss):
        model.zero_grad()
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()]).numpy().copy()

    grads = [
        [flat_grad(summed(*batches[(r, k)])) for k in range(len(row))]
        for r, row in enumerate(counts)
    ]
    before = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    total = sum(token_weight(r, k) * summed(*batches[(r, k)]) for (r, k) in batches if counts[r][k])
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    optimizer.zero_grad()
    total.backward()
    optimizer.step()
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    return grads, (after - before).numpy()


@pytest.mark.parametrize("scheme", uw.NAMED_SCHEMES)
def test_a_real_update_is_solved_back_to_its_scheme(scheme):
    counts = [[3, 8], [8, 16]]
    n = sum(map(sum, counts))
    expected = uw.scheme_weights_times_n(counts, scheme)
    grads, delta = _grads_and_delta(counts, lambda r, k: expected[r][k] / n)
    solved = uw.solve_weights(grads, delta, counts)
    assert solved.identifiable and solved.residual < 1e-12
    for got_row, want_row in zip(solved.weights_times_n, expected):
        assert got_row == pytest.approx(want_row, rel=1e-9)
    assert uw.closest_scheme(solved.weights_times_n, counts) == scheme


def test_equal_counts_cannot_tell_the_schemes_apart():
    counts = [[8, 8], [8, 8]]
    grid = uw.scheme_weights_times_n(counts, "replica_mean")
    assert uw.closest_scheme(grid, counts) == "global_token"  # the control passes wrong rules
    assert uw.matching_schemes(grid, counts) == ("global_token", "replica_mean", "microbatch_mean")


def test_an_empty_microbatch_is_null_and_a_clipped_update_is_other():
    counts = [[0, 5], [4, 6]]
    grads, delta = _grads_and_delta(counts, lambda r, k: 0.3 / 15)  # a uniform 0.3: clipped
    solved = uw.solve_weights(grads, delta, counts)
    assert solved.weights_times_n[0][0] is None
    assert solved.weights_times_n[1] == pytest.approx((0.3, 0.3), rel=1e-9)
    assert uw.closest_scheme(solved.weights_times_n, counts) == "other"


def test_an_update_that_is_no_weighted_sum_has_a_large_residual():
    counts = [[4, 4]]
    grads, delta = _grads_and_delta(counts, lambda r, k: 1 / 8)
    rng = np.random.default_rng(1)
    noisy = delta + rng.normal(size=delta.shape) * np.linalg.norm(delta)  # e.g. a regulariser
    assert uw.solve_weights(grads, noisy, counts).residual > 0.5


def test_no_step_and_no_labels():
    counts = [[0, 0]]
    zero = [0.0] * 4
    solved = uw.solve_weights([[zero, zero]], zero, counts)
    assert solved.weights_times_n == ((None, None),) and solved.residual is None
    assert uw.closest_scheme(solved.weights_times_n, counts) == "other"


def test_dependent_gradients_are_not_identifiable():
    g = [1.0, 2.0, 3.0]
    solved = uw.solve_weights([[g, [2.0, 4.0, 6.0]]], [-3.0, -6.0, -9.0], [[1, 1]])
    assert not solved.identifiable and solved.weights_times_n == ((None, None),)
    assert math.isclose(solved.residual, 0.0, abs_tol=1e-12)


@pytest.mark.parametrize(
    "grads, delta, field",
    [
        ([[[1.0, 2.0]]], [1.0], "grads[0][0]"),
        ([[[1.0, float("nan")]]], [1.0, 2.0], "grads[0][0]"),
        ([[[1.0, 2.0]]], [1.0, float("inf")], "delta"),
        ([], [1.0], "grads"),
    ],
)
def test_bad_input_names_the_value(grads, delta, field):
    with pytest.raises(InvalidInput) as caught:
        uw.solve_weights(grads, delta, [[1]])
    assert caught.value.field == field


@pytest.mark.parametrize(
    "counts, untold, evidence",
    [
        ([[8, 8], [8, 8]], ("replica_mean", "microbatch_mean"), False),  # the equal control
        ([[7, 7], [7, 7]], ("replica_mean", "microbatch_mean"), False),
        ([[16, 8], [7, 3]], (), True),  # uneven: every scheme's grid differs from 1
        ([[8, 8]], ("microbatch_mean",), False),  # P = 1: replica_mean IS the global mean
        ([[16, 8]], (), True),
        ([[5], [5]], ("replica_mean", "microbatch_mean"), False),  # K = 1, equal ranks
        ([[16], [8]], (), True),
        ([[16]], (), False),  # P x K = 1: nothing split, nothing to tell
        ([[0, 0], [0, 0]], (), False),  # N = 0: no weight defined, nothing to tell
        ([[4, 4], [2, 6]], ("replica_mean",), False),  # equal rank totals, unequal cells
    ],
)
def test_evidence_names_the_schemes_a_pass_cannot_rule_out(counts, untold, evidence):
    # hand-derived: replica_mean = N / (P n_r) is 1 iff every rank total is N / P;
    # microbatch_mean = N / (P K n_rk) is 1 iff every cell is N / (P K); double_scaled = 1 / K
    # and unnormalised_sum = N / P are 1 only at K = 1 or N = P, which none of these reach.
    got = uw.evidence(counts)
    assert (got.untold, got.evidence) == (untold, evidence)
    assert got.split == (len(counts) * len(counts[0]) >= 2)


def test_evidence_at_n_equal_p_cannot_tell_the_unnormalised_sum():
    assert "unnormalised_sum" in uw.evidence([[1], [1]]).untold  # N / P = 1: a sum is a mean


@pytest.mark.parametrize(
    "grid, scale",
    [
        ([[0.5, 0.5], [0.5, None]], 0.5),
        ([[0.0235] * 3] * 2, 0.0235),
        ([[1.0, 1.0]], None),  # the global token mean: no scale
        ([[1.0, 2.0]], None),  # not uniform
        ([[None, None]], None),  # nothing defined
    ],
)
def test_uniform_scale(grid, scale):
    got = uw.uniform_scale(grid)
    assert got == (None if scale is None else pytest.approx(scale, rel=1e-12))


def _causal_lm_step(label_cells, seed=3):
    """torchtune 0.6.1's form on a real causal LM (float64 autograd): per microbatch the mean
    cross-entropy over its terms after the shift, times its label count before the shift; the
    sum over microbatches divided by the global pre-shift count; one SGD(lr=1) step. Returns
    each microbatch's gradient of its summed shifted losses, the update, the terms and the
    labels placed."""
    gen = torch.Generator().manual_seed(seed)
    vocab, seq = 6, 5
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, 4), torch.nn.Linear(4, vocab)).double()
    for p in model.parameters():
        p.data = torch.randn(p.shape, generator=gen, dtype=torch.float64)
    batches = []
    for row in label_cells:  # each cell: the (sequence, position) pairs that hold a label
        out = []
        for cells in row:
            ids = torch.randint(0, vocab, (2, seq), generator=gen)
            labels = torch.full((2, seq), -100)
            for b, t in cells:
                labels[b, t] = int(torch.randint(0, vocab, (1,), generator=gen))
            out.append((ids, labels))
        batches.append(out)

    def shifted(ids, labels, reduction):
        logits = model(ids)[:, :-1].reshape(-1, vocab)
        return torch.nn.functional.cross_entropy(
            logits, labels[:, 1:].reshape(-1), ignore_index=-100, reduction=reduction
        )

    grads = []
    for row in batches:
        grads.append([])
        for ids, labels in row:
            model.zero_grad()
            shifted(ids, labels, "sum").backward()
            grads[-1].append(torch.cat([p.grad.flatten() for p in model.parameters()]).numpy())
    placed = [[int((lab != -100).sum()) for _, lab in row] for row in batches]
    terms = [[int((lab[:, 1:] != -100).sum()) for _, lab in row] for row in batches]
    before = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    model.zero_grad()
    total = sum(
        shifted(ids, lab, "mean") * int((lab != -100).sum()) for row in batches for ids, lab in row
    )
    (total / sum(map(sum, placed))).backward()
    torch.optim.SGD(model.parameters(), lr=1.0).step()
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    return grads, (after - before).numpy(), terms, placed


def test_labels_counted_before_the_shift_is_named_from_a_real_causal_lm():
    label_cells = [
        [[(0, 0), (0, 2), (1, 3)], [(1, 1), (1, 2), (0, 4), (1, 4)]],  # 3 labels 2 terms; 4, 4
        [[(0, 0), (1, 0), (0, 1), (1, 2), (0, 3)], [(0, 2)]],  # 5 labels 3 terms; 1, 1
    ]
    grads, delta, terms, placed = _causal_lm_step(label_cells)
    assert terms == [[2, 4], [3, 1]] and placed == [[3, 4], [5, 1]]
    solved = uw.solve_weights(grads, delta, terms)
    assert solved.identifiable and solved.residual < 1e-10
    n_terms, n_labels = 10, 13
    by_hand = [[3 / 2 * n_terms / n_labels, 1 * n_terms / n_labels], [5 / 3 * 10 / 13, 10 / 13]]
    for got, want in zip(solved.weights_times_n, by_hand):
        assert got == pytest.approx(want, rel=1e-9)
    predicted = uw.scheme_weights_times_n(terms, "labels_before_shift", placed)
    for got, want in zip(predicted, by_hand):
        assert got == pytest.approx(want, rel=1e-12)
    assert uw.closest_scheme(solved.weights_times_n, terms, labels=placed) == "labels_before_shift"
    assert uw.closest_scheme(solved.weights_times_n, terms) == "other"  # without the labels
    assert uw.evidence(terms, labels=placed).untold == ()


def test_labels_before_shift_is_untold_where_every_microbatch_shifts_alike():
    # no label at position 0 (l = t) or the same share of them: the global token mean's weights
    assert uw.evidence([[4, 6]], labels=[[4, 6]]).untold == ("labels_before_shift",)
    assert "labels_before_shift" in uw.evidence([[2, 4]], labels=[[3, 6]]).untold
    assert uw.evidence([[4, 6]]).untold == ()  # without labels it is never considered
    with pytest.raises(InvalidInput):
        uw.scheme_weights_times_n([[4, 6]], "labels_before_shift", [[3, 6]])  # fewer labels
