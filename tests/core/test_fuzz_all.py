"""Hostile-input fuzzing of every public core function not already fuzzed at >= 500 examples.

(tests/core/test_fuzz_ledger.py covers ledger.reduce_gradient, local_loss_scale,
global_loss, quadratic_ledger, split_sweep, framework.framework_update,
weighted_loss_scale, denominator.count_valid_labels and sequence_mean_weights;
tests/core/test_clipping.py covers clipping.clip_report.)

Every function gets at least 500 examples mixing NaN, +-inf, huge and tiny floats, huge
integers, None, text, booleans, empty and ragged nesting, and valid values. Rules:
    - the only exceptions are ValueError (naming the value) and TypeError;
    - every figure returned is finite or None (tensors and arrays included);
    - nothing hangs: each test has its own time limit.

A gap found here is marked `gap(...)` (a strict xfail) with the failing input as an
explicit example until its owner fixes it; then the mark goes and the example stays as a
regression test. No gap is open now: the tests below that once pinned one (huge rates,
tiny temperatures, unchecked sizes, non-tensor inputs, malformed reports) now check the
refusal.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pclab.core import (
    clipping,
    coverage,
    coverage_checks,
    framework,
    gradcache,
    infonce,
    ledger,
    limits,
    limits_clip,
    sampler,
    scenarios,
    trajectory,
)
from pclab.core import validation as v
from pclab.experiments.negatives import report as negatives_report
from pclab.experiments.transformer import coverage as transformer_coverage

EXAMPLES = 500
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
pytestmark = pytest.mark.timeout(120)  # a hang fails the test instead of the suite

scalars = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e308, max_value=1e308),
    st.floats(min_value=-1e-300, max_value=1e-300),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=-3, max_value=40),
    st.none(),
    st.text(max_size=3),
    st.booleans(),
)
small = st.integers(min_value=-3, max_value=40)  # mostly valid sizes and counts
sizes = st.one_of(small, scalars)  # valid, negative, huge, NaN, junk
rows = st.lists(scalars, max_size=5)
grids = st.one_of(
    st.lists(rows, max_size=4), st.lists(st.lists(small, max_size=3), max_size=3), rows, scalars
)
junk = st.one_of(scalars, rows, grids, st.dictionaries(st.text(max_size=2), scalars, max_size=3))


def outcome(function, *args, **kwargs):
    """The function's result, or None when it refused the input with ValueError/TypeError."""
    try:
        return function(*args, **kwargs)
    except (ValueError, TypeError) as exc:
        assert str(exc), "an error must say what was wrong"
        return None


def assert_clean(value, path="result"):
    """Every figure inside `value` is finite or None: floats, tensors, arrays, containers."""
    if value is None or isinstance(value, bool | int | str | torch.Generator | torch.nn.Module):
        return
    if isinstance(value, float):
        assert math.isfinite(value), f"{path} = {value}"
    elif isinstance(value, torch.Tensor):
        assert bool(torch.isfinite(value).all()) if value.is_floating_point() else True, path
    elif isinstance(value, np.ndarray | np.generic):
        assert bool(np.isfinite(value).all()), path
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            assert_clean(getattr(value, field.name), f"{path}.{field.name}")
    elif isinstance(value, dict):
        for key, item in value.items():
            assert_clean(item, f"{path}[{key!r}]")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            assert_clean(item, f"{path}[{i}]")
    else:
        raise AssertionError(f"{path}: unexpected {type(value).__name__}")


def clean(function, *args, **kwargs):
    result = outcome(function, *args, **kwargs)
    assert_clean(result)
    return result


def gap(reason: str):
    """A known validation gap: expected to fail until the owning module is fixed."""
    return pytest.mark.xfail(strict=True, reason=f"validation gap: {reason}")


# ---------------------------------------------------------------- core.validation


@FUZZ
@given(value=junk, low=small, high=small)
def test_scalar_checks(value, low, high):
    as_float = outcome(v.number, value, "x")  # a conversion only: inf stays inf by design
    assert as_float is None or isinstance(as_float, float)
    for check in (v.finite, v.positive, v.non_negative):
        clean(check, value, "x")
    clean(v.count, value, "n")
    clean(v.count, value, "n", minimum=1)
    assert outcome(v.choice, value, "c", ("a", "b")) in (None, "a", "b")
    clean(v.finite_result, value, "x", value)
    clean(limits.bounded_count, value, "n", low, high)
    clean(limits.seeded_generator, value)


@FUZZ
@given(value=st.one_of(junk, st.just(np.array([1.0, 2.0])), st.just(np.float64("nan"))))
def test_choice_refuses_what_it_cannot_compare(value):
    assert outcome(v.choice, value, "c", ("a", "b")) in (None, "a", "b")


@FUZZ
@given(table=junk, scheme=st.one_of(st.sampled_from(ledger.SCHEMES), scalars))
def test_grid_checks_and_ledger_weights(table, scheme):
    cells = outcome(v.grid, table, "g")  # a shape check only: the cells come back as given
    assert cells is None or (cells and len({len(row) for row in cells}) == 1)
    clean(v.count_grid, table, "g")
    clean(v.finite_grid, table, "g", (2, 2))
    clean(ledger.global_count, table)
    clean(ledger.microbatch_weights, table, scheme)
    clean(ledger.update_shares, table, scheme)


# ---------------------------------------------------------------- ledger, framework, scenarios


@FUZZ
@given(theta=scalars, gradient=scalars, lr=scalars)
def test_sgd_step(theta, gradient, lr):
    clean(ledger.sgd_step, theta, gradient, lr)


@FUZZ
@given(
    replicas=sizes,
    accum_steps=sizes,
    collective=st.one_of(st.sampled_from(ledger.COLLECTIVES), scalars),
    placement=st.one_of(st.sampled_from(framework.REGULARISER_PLACEMENTS), scalars),
)
def test_regulariser_multiplier(replicas, accum_steps, collective, placement):
    clean(framework.regulariser_multiplier, replicas, accum_steps, collective, placement)


@FUZZ
@given(replica=scalars, step=scalars)
def test_denominator_window(replica, step):
    clean(scenarios.denominator_window, replica, step)


# ---------------------------------------------------------------- infonce

reps = st.one_of(rows, st.lists(st.lists(scalars, max_size=3), max_size=3), scalars)


@FUZZ
@given(q=reps, d=reps, tau=scalars)
def test_contrastive(q, d, tau):
    result = clean(infonce.contrastive, q, d, tau)
    if result is not None:  # the table is built on first use: it must be finite too
        assert_clean(result.contributions, "result.contributions")


@FUZZ
@given(
    a=reps,
    b=reps,
    wq=scalars,
    wd=scalars,
    tau=scalars,
    scheme=st.one_of(st.sampled_from(infonce.SCHEMES), scalars),
)
def test_encoder_grads(a, b, wq, wd, tau, scheme):
    clean(infonce.encoder_grads, a, b, wq, wd, tau, scheme)


@FUZZ
@given(q=reps, d=reps, taus=st.one_of(st.lists(scalars, max_size=4), scalars), doc=sizes)
def test_tau_sweep(q, d, taus, doc):
    clean(infonce.tau_sweep, q, d, taus, doc)


run_reports = st.one_of(
    junk,
    st.fixed_dictionaries(
        {k: scalars for k in ("wq", "wd", "tau", "lr")} | {"a": reps, "b": reps},
        optional={
            "schemes": st.dictionaries(
                st.sampled_from(infonce.SCHEMES),
                st.one_of(
                    junk, st.dictionaries(st.sampled_from(["grad_wq", "grad_wd", "ranks"]), junk)
                ),
            )
        },
    ),
)


@FUZZ
@given(report=run_reports, tol=scalars)
def test_check_run(report, tol):
    clean(negatives_report.check_run, report, tol)


# ---------------------------------------------------------------- clipping

ids = st.one_of(st.sampled_from(["w0", "w1", "x"]), small)
triples = st.one_of(st.lists(st.tuples(small, ids, scalars), max_size=3), junk)
pairs_of = st.one_of(st.lists(st.tuples(ids, scalars), max_size=3), junk)
injects = st.one_of(
    st.none(),
    st.tuples(small, st.one_of(ids, st.none()), st.sampled_from(["inf", "nan", "x"])),
    junk,
)


@FUZZ
@given(
    name=st.one_of(st.sampled_from(list(clipping.SCENARIOS)), scalars),
    scale=scalars,
    sharded=triples,
    replicated=pairs_of,
    inject=injects,
)
def test_scenario_grads(name, scale, sharded, replicated, inject):
    # Non-finite gradients are legitimate here (an injected or overflowing loss scale):
    # clip_report turns them into the coordinated skip. Only the error types are checked.
    grads = outcome(
        clipping.scenario_grads,
        name,
        scale,
        extra_sharded=sharded,
        extra_replicated=replicated,
        inject=inject,
    )
    assert grads is None or all(isinstance(g, float) for held in grads for g in held.values())


seed_report = clipping.clip_report(clipping.scenario_grads("seed_replicated"), 1.0, 8.0)


@FUZZ
@given(
    max_threshold=scalars,
    points=sizes,
    variant=st.one_of(st.sampled_from(clipping.VARIANTS), scalars),
)
def test_threshold_sweep_and_protocol_marks(max_threshold, points, variant):
    clean(clipping.threshold_sweep, seed_report, max_threshold, points)
    clean(clipping.protocol_marks, seed_report, variant)


@FUZZ
@given(report=junk)
@example(report=1)
def test_threshold_sweep_and_protocol_marks_reject_a_non_report(report):
    clean(clipping.threshold_sweep, report)
    clean(clipping.protocol_marks, report, "global")


@FUZZ
@given(groups=st.one_of(st.lists(rows, max_size=3), junk))
@example(groups=[[math.nan]])
def test_norm_parts(groups):
    clean(clipping.norm_parts, groups)


@FUZZ
@given(norm=scalars, max_norm=scalars)
@example(norm=-1.0, max_norm=1.0)
def test_clip_coefficient(norm, max_norm):
    c = clean(clipping.clip_coefficient, norm, max_norm)
    assert c is None or 0.0 <= c <= 1.0


# ----------------------------------------------------------- limits, gradcache, trajectory, sampler


@FUZZ
@given(accum_steps=sizes, size=sizes, lr=scalars, reg=scalars, seed=sizes)
def test_window_update(accum_steps, size, lr, reg, seed):
    clean(limits.window_update, accum_steps, size, lr, reg, seed)


@FUZZ
@given(lr=st.floats(min_value=1e6, max_value=1e308), reg=st.floats(min_value=0, max_value=1e308))
@example(lr=1.2e24, reg=1.2e24)
def test_window_update_huge_rates(lr, reg):
    clean(limits.window_update, 5, 5, lr, reg, 0)


@FUZZ
@given(batch_size=sizes, accum_steps=sizes, seed=sizes)
def test_batchnorm_split(batch_size, accum_steps, seed):
    clean(limits.batchnorm_split, batch_size, accum_steps, seed)


@FUZZ
@given(accum_steps=sizes, dim=sizes, max_norm=scalars, seed=sizes)
def test_clip_split(accum_steps, dim, max_norm, seed):
    clean(limits_clip.clip_split, accum_steps, dim, max_norm, seed)


@FUZZ
@given(batch_size=sizes, accum_steps=sizes, tau=scalars, seed=sizes)
def test_negatives_split(batch_size, accum_steps, tau, seed):
    clean(gradcache.negatives_split, batch_size, accum_steps, tau, seed)


# 100 examples, not 500: every one of these is valid and builds an encoder (~0.05 s quiet,
# 28 s for 500 at load 8 and 131 s at load 20 - past the module's 120 s hang limit), and seven
# batch sizes over one subnormal range are covered well before that.
@settings(FUZZ, max_examples=100)
@given(batch_size=st.integers(2, 8), tau=st.floats(min_value=5e-324, max_value=1e-306))
@example(batch_size=2, tau=5e-324)
def test_negatives_split_tiny_tau(batch_size, tau):
    clean(gradcache.negatives_split, batch_size, 1, tau, 0)


@FUZZ
@given(seed=sizes)
def test_encoder(seed):
    clean(gradcache.encoder, seed)


@FUZZ
@given(count=st.one_of(st.integers(-3, 3000), scalars), replicas=sizes, seed=sizes)
def test_summation_order(count, replicas, seed):
    clean(trajectory.summation_order, count, replicas, seed)


@FUZZ
@given(batch_size=sizes, accum_steps=sizes, p=scalars, seed=sizes, features=sizes)
def test_dropout_split(batch_size, accum_steps, p, seed, features):
    clean(trajectory.dropout_split, batch_size, accum_steps, p, seed, features)


@FUZZ
@given(
    dataset_size=st.one_of(st.integers(-3, 2000), scalars),
    world_size=sizes,
    seed=sizes,
    epoch=sizes,
    drop_last=junk,
)
def test_sampler_epoch(dataset_size, world_size, seed, epoch, drop_last):
    clean(sampler.sampler_epoch, dataset_size, world_size, seed, epoch, drop_last)


# Helpers that build tensors from a size: each caps it (<= 100000 elements or so), so a huge
# size must be refused before anything is allocated.
bounded = st.one_of(
    st.integers(-3, 200),
    st.integers(10**6, 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.text(max_size=2),
)


@FUZZ
@given(n=bounded, dim=bounded, seed=sizes)
@example(n=-1, dim=2, seed=0)
def test_limits_data_helpers(n, dim, seed):
    clean(limits.regression_data, n, seed)
    clean(limits.norm_data, n, seed)
    clean(limits_clip.microstep_grads, n, dim, seed)


@FUZZ
@given(n=bounded, seed=sizes)
@example(n=-1, seed=0)
def test_gradcache_pairs(n, seed):
    clean(gradcache.pairs, n, seed)


@FUZZ
@given(n=bounded, features=bounded, p=scalars, seed=sizes)
@example(n=-1, features=2, p=0.5, seed=0)
def test_trajectory_and_sampler_helpers(n, features, p, seed):
    clean(trajectory.summands, n, seed)
    clean(trajectory.dropout_mask, n, features, p)
    clean(trajectory.sample_masks, n, features, p, seed)
    clean(sampler.sample_lengths, n)


tensors = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4).map(
        lambda xs: torch.tensor(xs, dtype=torch.float64)
    ),
    st.lists(st.lists(st.floats(-10, 10), min_size=4, max_size=4), min_size=1, max_size=3).map(
        lambda xs: torch.tensor(xs, dtype=torch.float64)
    ),
    st.lists(st.floats(-1e3, 1e3), max_size=0).map(lambda xs: np.array(xs, dtype=np.float32)),
    junk,
)


@FUZZ
@given(a=tensors, b=tensors, tau=scalars, k=bounded)
@example(a=torch.ones(2), b=torch.ones(3), tau=1.0, k=0)
def test_tensor_helpers(a, b, tau, k):
    clean(limits.max_abs_diff, a, b)
    clean(limits_clip.clip_vector, a, tau)
    clean(gradcache.info_nce_sum, a, b, tau)
    clean(gradcache.gradient_cache, gradcache.encoder(), a, b, k, tau)
    try:
        with gradcache.saved_activation_counter(a):
            pass
    except (ValueError, TypeError):
        pass
    clean(trajectory.sequential_sum, a)


# ---------------------------------------------------------------- coverage, coverage_checks

evidence = st.builds(
    coverage.Evidence,
    st.one_of(st.sampled_from(coverage.ROWS), scalars),
    st.one_of(st.sampled_from(coverage.COLUMNS), scalars),
    st.one_of(st.sampled_from(coverage.SOURCES), scalars),
    scalars,
    scalars,
    scalars,
    st.booleans(),
)


@FUZZ
@given(
    items=st.one_of(st.lists(evidence, max_size=6), junk),
    source=st.one_of(st.sampled_from(coverage.SOURCES), scalars),
    diff=scalars,
    tolerance=scalars,
)
def test_coverage_matrix_and_within(items, source, diff, tolerance):
    # A measured gap is passed through as given (None means "not finite"): check the types.
    matrix = outcome(coverage.coverage_matrix, items, source)
    assert matrix is None or {c.status for c in matrix.cells.values()} <= set(coverage.STATUSES)
    assert outcome(coverage.within, diff, tolerance) in (None, True, False)


@FUZZ
@given(
    item=st.one_of(evidence, junk),
    report=st.one_of(junk, st.fixed_dictionaries({"branches": junk, "tolerance": scalars})),
)
@example(item=1, report={"branches": [1], "tolerance": 1.0})
def test_coverage_helpers(item, report):
    assert outcome(coverage.cell_status, item) in (None, *coverage.STATUSES)
    outcome(transformer_coverage.transformer_rows, report)
    outcome(transformer_coverage.evidence_from_transformer, report)


@FUZZ
@given(row=st.one_of(st.sampled_from(list(coverage_checks.SCENARIOS)), scalars), seed=sizes)
def test_scenario_batches(row, seed):
    clean(coverage_checks.scenario_batches, row, seed)


@FUZZ
@given(
    slip=st.one_of(st.sampled_from(coverage_checks.SLIPS), scalars),
    seed=sizes,
    rows=st.one_of(st.lists(st.sampled_from(list(coverage_checks.SCENARIOS)), max_size=1), junk),
)
def test_run_checks(slip, seed, rows):
    run = clean(coverage_checks.run_checks, slip, seed, rows)
    assert run is None or all(isinstance(e, coverage.Evidence) for e in run.evidence)
