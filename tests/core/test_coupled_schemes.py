"""core.coupled_schemes against real updates: trainers written out by hand (each scheme's
objective by explicit construction, a x P compensation, OpenCLIP's whole loss with remote
rows detached) step SGD at lr 1 in float64, and the solve names what they optimised from
the candidates core.coupled_objectives computes. Closed forms and properties for the
scale; the evidence rules at K = 1, P x K = 1 and for an additive loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pclab.core import coupled_objectives as co
from pclab.core import coupled_schemes as cs
from pclab.core.validation import InvalidInput
from tests.core import coupled_references as ref
from tests.core import test_fuzz_all as fuzz

PROPERTY = settings(max_examples=200, deadline=None)
UNEVEN = [[2, 3], [2, 3]]  # P = 2, K = 2, sizes varying between micro steps


def info_nce_candidates(sizes):
    grid = ref.pairs_grid(sizes)
    grads = co.candidate_gradients(
        ref.Dual(), grid, ref.info_nce_batch_loss, ref.embed, ref.embedding_loss
    )
    return grid, grads


@pytest.mark.parametrize("scheme", co.NAMED_SCHEMES)
def test_a_trainer_of_each_scheme_is_named(scheme):
    grid, grads = info_nce_candidates(UNEVEN)
    delta = ref.sgd_change(ref.Dual, lambda m: ref.info_nce_objective(scheme, m, grid))
    solved = cs.solve_schemes(delta, grads)
    assert solved.scheme == scheme
    assert solved.matching_schemes == (scheme,)
    assert solved.gaps[scheme] < 1e-12 and solved.residual == solved.gaps[scheme]
    assert min(g for s, g in solved.gaps.items() if s != scheme) > 1e-3
    assert solved.coinciding == () and solved.untold == () and solved.evidence
    if scheme == "global_batch":
        assert solved.scale == pytest.approx(1.0, rel=1e-12)
        assert solved.scale_groups == ()


@pytest.mark.parametrize("factor", [2.0, 0.5, -1.0])
def test_a_compensation_on_the_right_gradient_is_scaled_once(factor):
    """A x P on top of a gradient-carrying gather (factor 2 at P = 2), or a sign flip."""
    grid, grads = info_nce_candidates(UNEVEN)
    objective = lambda m: ref.info_nce_objective("global_batch", m, grid)  # noqa: E731
    solved = cs.solve_schemes(ref.sgd_change(ref.Dual, objective, factor), grads)
    assert (solved.scheme, solved.matching_schemes) == ("scaled", ())
    assert solved.scale == pytest.approx(factor, rel=1e-12)
    assert solved.residual < 1e-12
    assert [(g.factor, g.parameters) for g in solved.scale_groups] == [
        (solved.scale, ("wq", "wd", "log_tau"))
    ]
    assert solved.parameter_scales == pytest.approx(dict.fromkeys(("wq", "wd", "log_tau"), factor))


@pytest.mark.parametrize("sizes", [[[2], [2]], [[3], [3], [3]], [[2, 3], [2, 3]]])
def test_openclip_whole_loss_with_remote_rows_detached_is_scaled_per_group(sizes):
    """Every rank's whole-batch loss, its own rows carrying gradient, then DDP's mean: the
    encoder gets the global gradient / P, the temperature all of it (x 1)."""
    p = len(sizes)
    grid, grads = info_nce_candidates(sizes)
    delta = ref.sgd_change(ref.Dual, lambda m: ref.whole_loss_remote_detached(m, grid))
    solved = cs.solve_schemes(delta, grads)
    assert solved.scheme == "scaled" and solved.residual < 1e-12
    assert solved.parameter_scales == pytest.approx({"wq": 1 / p, "wd": 1 / p, "log_tau": 1.0})
    got = [(round(g.factor, 9), g.parameters) for g in solved.scale_groups]
    assert got == [(round(1 / p, 9), ("wq", "wd")), (1.0, ("log_tau",))]


def clip_candidates(sizes, symmetric=True):
    grid = ref.pairs_grid(sizes)
    grads = co.candidate_gradients(
        ref.Dual(), grid, None, ref.embed, ref.clip_direction, symmetric=symmetric
    )
    return grid, grads


@pytest.mark.parametrize("sizes", [[[3], [3]], [[2], [2], [2]], [[2, 3], [2, 3]]])
@pytest.mark.parametrize("scheme", co.NAMED_SCHEMES)
def test_a_symmetric_clip_trainer_of_each_scheme_is_named(sizes, scheme):
    """A symmetric CLIP loss written out (OpenCLIP's local_loss=True, gather_with_grad=False
    is its query_path_only), stepped at SGD lr 1: named among the symmetric candidates."""
    grid, grads = clip_candidates(sizes)
    delta = ref.sgd_change(ref.Dual, lambda m: ref.clip_objective(scheme, m, grid))
    solved = cs.solve_schemes(delta, grads)
    # at K = 1 a pool coincides with another (identical_objectives): the group's first
    assert solved.scheme in (scheme, *[g[0] for g in solved.coinciding if scheme in g])
    assert scheme in solved.matching_schemes and solved.gaps[scheme] < 1e-12
    if scheme in co.PATH_SCHEMES:  # a path is never a pool here
        assert solved.matching_schemes == (scheme,)


@pytest.mark.parametrize("sizes", [[[3], [3]], [[2], [2], [2]]])
def test_clip_whole_loss_with_local_rows_stays_scaled_with_the_paths_given(sizes):
    """OpenCLIP's defaults: the paths in each direction are no match, so still `scaled`,
    the towers / P and the temperature x 1."""
    p = len(sizes)
    grid, grads = clip_candidates(sizes)
    delta = ref.sgd_change(ref.Dual, lambda m: ref.clip_whole_loss_local_rows(m, grid))
    solved = cs.solve_schemes(delta, grads)
    assert solved.scheme == "scaled" and solved.residual < 1e-12
    assert min(solved.gaps[s] for s in co.PATH_SCHEMES) > 1e-3
    assert solved.parameter_scales == pytest.approx({"wq": 1 / p, "wd": 1 / p, "log_tau": 1.0})


def test_clip_query_path_only_without_the_symmetric_candidates_is_other():
    """The old finding: with the pools alone (a symmetric loss refuses the paths) the query
    side of each direction is no pool and no scaling: `other`."""
    grid = ref.pairs_grid([[3], [3]])
    batch_loss = co.embedding_batch_loss(ref.embed, ref.clip_direction, symmetric=True)
    grads = co.candidate_gradients(ref.Dual(), grid, batch_loss)
    delta = ref.sgd_change(ref.Dual, lambda m: ref.clip_objective("query_path_only", m, grid))
    solved = cs.solve_schemes(delta, grads)
    assert solved.scheme == "other" and solved.residual > 0.1


def test_a_loss_times_p_over_detached_remote_documents_is_other_with_its_fit():
    """tevatron #30: each rank's loss x world size, remote documents without gradient. No
    scaling of the global batch's gradient: `other`, and the fits say what it is."""
    grid, grads = info_nce_candidates(UNEVEN)
    objective = lambda m: ref.info_nce_objective("remote_detached", m, grid)  # noqa: E731
    solved = cs.solve_schemes(ref.sgd_change(ref.Dual, objective, 2.0), grads)
    assert solved.scheme == "other" and solved.residual > 1e-3
    assert solved.fits["remote_detached"].factor == pytest.approx(2.0, rel=1e-12)
    assert solved.fits["remote_detached"].residual < 1e-12
    assert solved.gaps["remote_detached"] == pytest.approx(0.5, rel=1e-12)  # |-2g + g| / |2g|


def test_an_update_that_is_no_candidate_and_no_scaling_is_other():
    grid, grads = info_nce_candidates(UNEVEN)
    rng = np.random.default_rng(3)
    delta = {n: g.numpy() + rng.normal(size=g.shape) for n, g in grads["global_batch"].items()}
    solved = cs.solve_schemes(delta, grads)
    assert solved.scheme == "other" and solved.matching_schemes == ()
    assert solved.residual > 0.1
    assert solved.scale_groups == ()


def test_no_step_is_other_with_an_undefined_residual():
    _, grads = info_nce_candidates(UNEVEN)
    zero = {n: torch.zeros_like(g) for n, g in grads["global_batch"].items()}
    solved = cs.solve_schemes(zero, grads)
    assert solved.scheme == "other" and solved.residual is None and solved.scale == 0.0
    assert set(solved.gaps.values()) == {1.0}  # |0 + g| / |g| for every candidate


def test_at_k_1_coinciding_pools_are_listed_together_and_a_pass_is_no_evidence():
    grid, grads = info_nce_candidates([[2], [3]])
    right = ref.sgd_change(ref.Dual, lambda m: ref.info_nce_objective("global_batch", m, grid))
    solved = cs.solve_schemes(right, grads)
    assert solved.matching_schemes == ("global_batch", "microstep_pool")
    assert solved.scheme == "global_batch"
    assert solved.coinciding == co.identical_objectives(2, 1)
    assert solved.untold == ("microstep_pool",) and not solved.evidence
    naive = ref.sgd_change(ref.Dual, lambda m: ref.info_nce_objective("microbatch_pool", m, grid))
    wrong = cs.solve_schemes(naive, grads)
    assert wrong.matching_schemes == ("rank_pool", "microbatch_pool")
    assert wrong.scheme == "rank_pool" and not wrong.evidence


def test_one_microbatch_tells_nothing_apart():
    grid, grads = info_nce_candidates([[4]])
    right = ref.sgd_change(ref.Dual, lambda m: ref.info_nce_objective("global_batch", m, grid))
    solved = cs.solve_schemes(right, grads)
    assert solved.untold == (*co.POOL_SCHEMES[1:], "remote_detached")
    assert not solved.evidence
    only = cs.solve_schemes(right, {"global_batch": grads["global_batch"]})
    assert only.scheme == "global_batch" and not only.evidence  # nothing else was asked


def test_an_additive_loss_makes_every_pool_alike_at_equal_sizes():
    """Per-item losses with no coupling (a linear classifier's cross-entropy, equal sizes):
    every pool is the global batch, so no pool can be told apart."""
    model = lambda: torch.nn.Linear(3, 3).double()  # noqa: E731
    torch.manual_seed(0)
    start = model().state_dict()

    def fresh():
        m = model()
        m.load_state_dict(start)
        return m

    grid = ref.labelled_grid([[2, 2], [2, 2]])

    def loss(m, microbatches):
        x = torch.cat([b["x"] for b in microbatches])
        y = torch.cat([b["y"] for b in microbatches])
        return torch.nn.functional.cross_entropy(m(x), y)

    grads = co.candidate_gradients(fresh(), grid, loss)
    delta = ref.sgd_change(fresh, lambda m: loss(m, [b for row in grid for b in row]))
    solved = cs.solve_schemes(delta, grads)
    assert solved.matching_schemes == co.POOL_SCHEMES
    assert solved.untold == co.POOL_SCHEMES[1:] and not solved.evidence


def test_a_zero_reference_gradient_names_nothing():
    zero = {"w": [0.0, 0.0]}
    solved = cs.solve_schemes(zero, {"global_batch": zero, "rank_pool": {"w": [1.0, 0.0]}})
    assert solved.scheme is None and solved.scale is None and not solved.evidence
    assert solved.gaps == {"global_batch": 0.0, "rank_pool": 1.0}


finite = st.floats(-10, 10, allow_nan=False).filter(lambda x: abs(x) > 1e-2)
factors = st.floats(-5, 5, allow_nan=False).filter(lambda c: abs(c) > 1e-3 and abs(c - 1) > 1e-3)


@PROPERTY
@given(
    g=st.lists(finite, min_size=1, max_size=6),
    h=st.lists(finite, min_size=2, max_size=2),
    c=factors,
)
def test_scaled_recovers_c_for_a_gradient_times_c(g, h, c):
    grad = {"encoder": np.array(g), "tau": np.array(h)}
    delta = {n: -c * x for n, x in grad.items()}
    solved = cs.solve_schemes(delta, {"global_batch": grad})
    assert solved.scheme == "scaled"
    assert math.isclose(solved.scale, c, rel_tol=1e-9)
    assert len(solved.scale_groups) == 1
    assert solved.scale_groups[0].parameters == ("encoder", "tau")


@PROPERTY
@given(g=st.lists(finite, min_size=2, max_size=6), h=finite, c=factors, e=factors)
def test_scaled_recovers_each_groups_factor(g, h, c, e):
    if math.isclose(c, e, rel_tol=1e-3, abs_tol=1e-3):
        return  # one factor: the uniform case above
    grad = {"encoder": np.array(g), "tau": np.array([h])}
    delta = {"encoder": -c * grad["encoder"], "tau": -e * grad["tau"]}
    solved = cs.solve_schemes(delta, {"global_batch": grad})
    assert solved.scheme == "scaled" and solved.residual < 1e-9
    want = sorted([(c, ("encoder",)), (e, ("tau",))])
    got = [(g.factor, g.parameters) for g in solved.scale_groups]
    assert [names for _, names in got] == [names for _, names in want]
    assert [f for f, _ in got] == pytest.approx([f for f, _ in want], rel=1e-9)


@PROPERTY
@given(g=st.lists(finite, min_size=1, max_size=6))
def test_the_global_gradient_itself_is_the_global_batch(g):
    grad = {"w": np.array(g)}
    solved = cs.solve_schemes({"w": -np.array(g)}, {"global_batch": grad})
    assert solved.scheme == "global_batch" and solved.gaps["global_batch"] == 0.0


W = {"w": [1.0, 2.0]}


@pytest.mark.parametrize(
    "delta, candidates, rtol, field",
    [
        (W, {"rank_pool": W}, 1e-6, "candidates"),
        (W, {"global_batch": W, "global_sum": W}, 1e-6, "candidates"),
        (W, [W], 1e-6, "candidates"),
        (W, {"global_batch": {"v": [1.0, 2.0]}}, 1e-6, "candidates[global_batch]"),
        (W, {"global_batch": {"w": [1.0]}}, 1e-6, "candidates[global_batch][w]"),
        (W, {"global_batch": {"w": [1.0, math.nan]}}, 1e-6, "candidates[global_batch][w]"),
        ({"w": [1.0, math.inf]}, {"global_batch": W}, 1e-6, "delta[w]"),
        ({"w": ["one", 2.0]}, {"global_batch": W}, 1e-6, "delta[w]"),
        ({}, {"global_batch": W}, 1e-6, "delta"),
        (W, {"global_batch": W}, -1.0, "rtol"),
    ],
)
def test_bad_input_names_the_value(delta, candidates, rtol, field):
    with pytest.raises(InvalidInput) as caught:
        cs.solve_schemes(delta, candidates, rtol)
    assert caught.value.field == field


def test_tensors_and_arrays_of_any_shape_are_accepted():
    grad = {"w": torch.ones(2, 3, dtype=torch.float64), "b": np.ones(3)}
    delta = {"b": -2 * np.ones(3), "w": -2 * torch.ones(2, 3)}  # names in another order
    solved = cs.solve_schemes(delta, {"global_batch": grad})
    assert solved.scheme == "scaled" and solved.scale == pytest.approx(2.0)


def test_a_float32_trainer_is_named_at_the_float32_tolerance():
    """Candidates come back as float64 from a float32 model; the step is float32 SGD."""
    grid = [[{k: t.float() for k, t in mb.items()} for mb in row] for row in ref.pairs_grid(UNEVEN)]
    single = lambda: ref.Dual().float()  # noqa: E731
    grads = co.candidate_gradients(
        single(), grid, ref.info_nce_batch_loss, ref.embed, ref.embedding_loss
    )
    assert all(g.dtype == torch.float64 for g in grads["rank_pool"].values())
    for scheme in ("global_batch", "microstep_pool"):
        objective = lambda m, s=scheme: ref.info_nce_objective(s, m, grid)  # noqa: E731
        solved = cs.solve_schemes(ref.sgd_change(single, objective), grads, rtol=1e-4)
        assert solved.scheme == scheme and solved.evidence
        assert solved.gaps[scheme] < 1e-5  # float32 rounding, well inside 1e-4


# Hostile input, as tests/core/test_fuzz_all.py does for the other core functions: only a
# ValueError or TypeError that says what was wrong, and every figure finite or None.
entries = st.one_of(fuzz.scalars, st.sampled_from([1e308, -1e308, 1e-300, 1e-200, 0.0, 1.0]))
vectors = st.dictionaries(st.sampled_from(["w", "b"]), st.lists(entries, max_size=3), max_size=2)
gradient_maps = st.dictionaries(
    st.one_of(st.sampled_from(co.NAMED_SCHEMES), st.text(max_size=2)),
    st.one_of(vectors, fuzz.junk),
    max_size=4,
)


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    delta=st.one_of(vectors, fuzz.junk),
    candidates=st.one_of(gradient_maps, fuzz.junk),
    rtol=st.one_of(st.just(1e-6), fuzz.scalars),
)
@example(delta={"w": [1e308, 1e308]}, candidates={"global_batch": {"w": [1e-300, 1.0]}}, rtol=1e-6)
@example(delta={"w": [1e-300]}, candidates={"global_batch": {"w": [1e308]}}, rtol=1e-6)
def test_hostile_input_is_refused_or_answered_with_finite_figures(delta, candidates, rtol):
    solved = fuzz.clean(cs.solve_schemes, delta, candidates, rtol)
    assert solved is None or solved.scheme in (None, *cs.SCHEMES)


def test_extreme_but_finite_sizes_keep_their_answer():
    tiny = {"w": [3e-300, -1e-300]}
    solved = cs.solve_schemes({"w": [-6e-300, 2e-300]}, {"global_batch": tiny})
    assert solved.scheme == "scaled" and solved.scale == pytest.approx(2.0, rel=1e-15)
    huge = {"w": [1e308, -1e308]}
    solved = cs.solve_schemes({"w": [-1e308, 1e308]}, {"global_batch": huge})
    assert solved.scheme == "global_batch" and solved.gaps == {"global_batch": 0.0}
