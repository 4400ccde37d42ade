"""core.windows against a one-process autograd run of the same counts: each loop written out
as a training loop would (per-rank backward, DDP's mean of the ranks' gradients), every term
a loss theta * 1, so the gradient the update applies is the loop's weight sum."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pclab.core import validation as v
from pclab.core.windows import LOOPS, epoch_updates, epoch_windows


def _autograd_weight_sums(counts, k, loop):
    """The gradient of each window's update, by running the loop: None where a mean over an
    empty microbatch (or N = 0) leaves it undefined."""
    m, p = len(counts[0]), len(counts)
    sums = []
    for start in range(0, m, k):
        window = [row[start : start + k] for row in counts]
        n = sum(map(sum, window))
        theta = torch.zeros((), dtype=torch.float64, requires_grad=True)
        grads = []
        for row in window:
            theta.grad = None
            loss = torch.zeros((), dtype=torch.float64)
            for count in row:
                terms = theta * torch.ones(count, dtype=torch.float64)
                if loop == "global_tokens":
                    loss = loss + terms.sum() / n * p  # summed over ranks by DDP's mean x P
                else:
                    divisor = len(row) if loop == "window_count" else k
                    loss = loss + terms.mean() / divisor
            loss.backward()
            grads.append(float(theta.grad))
        grad = sum(grads) / p  # DDP's mean over the ranks
        sums.append(None if math.isnan(grad) or (loop == "global_tokens" and n == 0) else grad)
    return sums


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(
    "counts, k",
    [([[3, 5, 2, 4, 6], [1, 7, 2, 2, 3]], 2), ([[4, 1, 3]], 2), ([[2, 2, 2, 5]], 3)],
)
def test_weight_sums_are_the_loops_gradient(counts, k, loop):
    got = [u.weight_sum for u in epoch_updates(counts, k, loop)]
    want = _autograd_weight_sums(counts, k, loop)
    assert got == pytest.approx(want)


def test_the_seeds_tail_under_a_divide_by_k_loop_is_half_the_update():
    updates = epoch_updates([[3, 5, 2, 4, 6], [1, 7, 2, 2, 3]], 2, "accum_steps")
    assert [u.window.microsteps for u in updates] == [2, 2, 1]
    assert updates[-1].window.is_tail and updates[-1].ratio == 0.5
    assert [u.window.num_valid_labels for u in updates] == [16, 10, 9]


def test_an_empty_window_is_skipped_and_an_empty_microbatch_has_no_mean():
    updates = epoch_updates([[0, 0, 3, 0]], 2, "global_tokens")
    assert updates[0].weight_sum is None and updates[0].correct_weight_sum is None
    assert updates[1].weight_sum == 1.0
    assert epoch_updates([[0, 0, 3, 0]], 2, "accum_steps")[1].weight_sum is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 9), min_size=5, max_size=5), min_size=1, max_size=3),
    st.integers(1, 5),
)
def test_windows_cover_the_epoch_and_the_correct_loop_sums_to_one(counts, k):
    windows = epoch_windows(5, k)
    assert sum(length for _, length in windows) == 5
    assert all(length == k for _, length in windows[:-1])
    for update in epoch_updates(counts, k, "global_tokens"):
        n = update.window.num_valid_labels
        assert (update.weight_sum is None) == (n == 0)
        assert n == 0 or update.weight_sum == pytest.approx(1.0)


@pytest.mark.parametrize(
    "counts, k, loop, field",
    [
        ([[1, -1]], 2, "global_tokens", "counts"),
        ([[1]], 0, "accum_steps", "accum_steps"),
        ([[1]], 1, "mean", "loop"),
        ([[1] * 65], 2, "accum_steps", "counts"),
    ],
)
def test_bad_input_names_the_value(counts, k, loop, field):
    with pytest.raises(v.InvalidInput) as caught:
        epoch_updates(counts, k, loop)
    assert caught.value.name == field
