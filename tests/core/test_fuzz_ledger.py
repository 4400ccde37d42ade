"""Fuzzing the ledger-side public functions with hostile input.

Whatever arrives - NaN, ±inf, huge or tiny floats, strings, None, empty or ragged
nesting - the only exceptions allowed are ValueError (naming the value) and TypeError,
and a returned figure is either None (undefined) or a finite float.
"""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pclab.core import denominator, framework, ledger

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e308, max_value=1e308),
    st.floats(min_value=-1e-300, max_value=1e-300),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=0, max_value=50),
    st.none(),
    st.text(max_size=3),
    st.booleans(),
)
rows = st.lists(scalars, min_size=0, max_size=4)
grids = st.one_of(st.lists(rows, min_size=0, max_size=4), scalars, st.text(max_size=3))
count_rows = st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=3)
count_grids = st.lists(count_rows, min_size=1, max_size=3)


def assert_figure(value):
    assert value is None or (isinstance(value, float) and math.isfinite(value)), value


def call(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        assert str(exc), "an error must say what was wrong"
        return None


@FUZZ
@given(grad_sums=grids, counts=grids, scheme=st.sampled_from([*ledger.SCHEMES, "mean", "", None]))
def test_reduce_gradient_fuzz(grad_sums, counts, scheme):
    assert_figure(call(ledger.reduce_gradient, grad_sums, counts, scheme))


@FUZZ
@given(grad_sums=grids, counts=count_grids, scheme=st.sampled_from(ledger.SCHEMES))
def test_reduce_gradient_fuzz_valid_counts(grad_sums, counts, scheme):
    assert_figure(call(ledger.reduce_gradient, grad_sums, counts, scheme))


@FUZZ
@given(counts=grids, collective=st.sampled_from(["mean", "sum", "max", None]))
def test_local_loss_scale_fuzz(counts, collective):
    assert_figure(call(ledger.local_loss_scale, counts, collective))


@FUZZ
@given(loss_sums=grids, counts=grids)
def test_global_loss_fuzz(loss_sums, counts):
    assert_figure(call(ledger.global_loss, loss_sums, counts))


@FUZZ
@given(counts=rows, targets=rows, theta=scalars, lr=scalars)
def test_quadratic_ledger_fuzz(counts, targets, theta, lr):
    result = call(ledger.quadratic_ledger, counts, targets, theta, lr)
    if result is not None:
        # Finite inputs can still overflow (1e308 squared): such a result must be refused,
        # never returned as inf/NaN for a page to show.
        for value in [*result.gradients.values(), *result.theta_after.values(), result.global_loss]:
            assert_figure(value)


@FUZZ
@given(total=scalars, targets=rows, theta=scalars)
def test_split_sweep_fuzz(total, targets, theta):
    call(ledger.split_sweep, total, targets, theta)


@FUZZ
@given(
    grad_sums=grids,
    counts=grids,
    collective=st.sampled_from(["mean", "sum", "avg"]),
    loss_input=st.sampled_from(["sum", "local_mean", "mean"]),
    reg=scalars,
    placement=st.sampled_from(["once", "every_microstep", "never"]),
)
def test_framework_update_fuzz(grad_sums, counts, collective, loss_input, reg, placement):
    call(
        framework.framework_update, grad_sums, counts, collective, loss_input, False, reg, placement
    )


@FUZZ
@given(weights=grids, collective=st.sampled_from(["mean", "sum", "x"]))
def test_weighted_loss_scale_fuzz(weights, collective):
    assert_figure(call(framework.weighted_loss_scale, weights, collective))


@FUZZ
@given(positions=scalars, padding=scalars, prompt=scalars, truncated=scalars)
def test_count_valid_labels_fuzz(positions, padding, prompt, truncated):
    result = call(denominator.count_valid_labels, positions, padding, prompt, truncated)
    if result is not None:
        assert result.valid >= 0


@FUZZ
@given(counts=st.one_of(rows, scalars))
def test_sequence_mean_weights_fuzz(counts):
    call(denominator.sequence_mean_weights, counts)


def test_a_subnormal_total_weight_is_refused_not_inf():
    """Found by the fuzz test: P / sum w overflows float64 for a subnormal weight total."""
    with pytest.raises(ValueError, match="weight_sums"):
        framework.weighted_loss_scale([[2.225073858507e-311]], "mean")
