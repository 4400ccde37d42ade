"""core.coupled_objectives against independent computations: every scheme's gradient on a
hand-built InfoNCE batch (learnable temperature) and a BatchNorm classifier batch, each
objective written out by hand in tests/core/coupled_references.py and differentiated by
torch autograd in float64; the seed's two-pair example against its closed form
(core.infonce) and its published numbers."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pclab.core import coupled_objectives as co
from pclab.core import infonce
from pclab.core.validation import InvalidInput
from tests.core import coupled_references as ref
from tests.core import test_fuzz_all as fuzz

PROPERTY = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Sizes vary between micro steps (a gather needs a micro step's size equal across ranks; the
# one-process objectives do not) and, in the second grid, between ranks.
GRIDS = ([[2, 3], [2, 3]], [[3, 2, 4], [1, 2, 2]])
BATCHNORM_GRIDS = ([[2, 3], [2, 3]], [[3, 2, 4], [2, 5, 2]])  # BatchNorm trains on 2 or more


def assert_same(got, want, rel=1e-12):
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == torch.float64
        scale = 1 + float(want[name].abs().max())
        assert float((got[name] - want[name]).abs().max()) <= rel * scale, name


def apart(x, y):
    return max(float((x[n] - y[n]).abs().max()) for n in x)


@pytest.mark.parametrize("sizes", GRIDS)
@pytest.mark.parametrize("scheme", co.NAMED_SCHEMES)
def test_info_nce_candidates_match_autograd_by_construction(sizes, scheme):
    grid = ref.pairs_grid(sizes)
    want = ref.reference_gradient(ref.Dual, lambda m: ref.info_nce_objective(scheme, m, grid))
    got = co.candidate_gradient(
        scheme, ref.Dual(), grid, ref.info_nce_batch_loss, ref.embed, ref.embedding_loss
    )
    assert_same(got, want)
    # embed + embedding_loss alone stand in for batch_loss (the concatenated rows)
    alone = co.candidate_gradient(scheme, ref.Dual(), grid, None, ref.embed, ref.embedding_loss)
    assert_same(alone, want)


def test_at_p_2_k_2_every_info_nce_candidate_differs():
    grid = ref.pairs_grid(GRIDS[0])
    grads = co.candidate_gradients(
        ref.Dual(), grid, ref.info_nce_batch_loss, ref.embed, ref.embedding_loss
    )
    assert list(grads) == list(co.NAMED_SCHEMES)
    names = list(grads)
    for i, s in enumerate(names):
        for t in names[i + 1 :]:
            assert apart(grads[s], grads[t]) > 1e-3, (s, t)
    # no document carries gradient: the document encoder gets none at all
    assert float(grads["query_path_only"]["wd"].abs().max()) == 0.0


@pytest.mark.parametrize("sizes", BATCHNORM_GRIDS)
@pytest.mark.parametrize("scheme", co.POOL_SCHEMES)
def test_batchnorm_pools_match_statistics_computed_by_hand(sizes, scheme):
    grid = ref.labelled_grid(sizes)
    want = ref.reference_gradient(
        ref.Classifier, lambda m: ref.classifier_objective(scheme, m, grid)
    )
    got = co.candidate_gradient(scheme, ref.Classifier(), grid, ref.classifier_batch_loss)
    assert_same(got, want)


def test_batchnorm_pools_differ_and_the_model_leaves_as_it_came():
    grid = ref.labelled_grid(GRIDS[0])
    model = ref.Classifier()
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(5)
    stream = torch.random.get_rng_state()
    grads = co.candidate_gradients(model, grid, ref.classifier_batch_loss)
    assert list(grads) == list(co.POOL_SCHEMES)  # no embed: the pools only
    assert apart(grads["global_batch"], grads["rank_pool"]) > 1e-3  # per-rank statistics
    assert apart(grads["microbatch_pool"], grads["microstep_pool"]) > 1e-3
    assert all(torch.equal(b, buffers[n]) for n, b in model.named_buffers())
    assert all(torch.equal(p, weights[n]) for n, p in model.named_parameters())
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.random.get_rng_state(), stream)


def seed_table():
    """The seed's two logical ranks as parameters: q = [1, 2], d = [1, -1], tau = 1."""
    model = torch.nn.Module()
    model.q = torch.nn.Parameter(torch.tensor(infonce.SEED["q"], dtype=torch.float64)[:, None])
    model.d = torch.nn.Parameter(torch.tensor(infonce.SEED["d"], dtype=torch.float64)[:, None])
    return model


def seed_embed(model, row):
    return model.q[row : row + 1], model.d[row : row + 1]


def seed_loss(model, queries, documents):
    logits = queries @ documents.T / infonce.SEED["tau"]
    return torch.nn.functional.cross_entropy(logits, torch.arange(len(queries)))


def test_the_seeds_two_pairs_full_against_detached():
    grid = [[0], [1]]  # P = 2, K = 1: one pair per rank
    closed = infonce.contrastive(infonce.SEED["q"], infonce.SEED["d"], infonce.SEED["tau"])
    batch_loss = co.embedding_batch_loss(seed_embed, seed_loss)
    loss = co.pool_objective("global_batch", batch_loss, seed_table(), grid).detach()
    assert float(loss) == pytest.approx(closed.loss, rel=1e-14)
    assert round(float(loss), 6) == 2.072539  # the seed's published loss

    def d_grad(scheme):
        grads = co.candidate_gradient(scheme, seed_table(), grid, None, seed_embed, seed_loss)
        return grads["d"][:, 0].tolist()

    full, detached = d_grad("global_batch"), d_grad("remote_detached")
    assert full == pytest.approx(closed.grad_d_full, rel=1e-13)
    assert detached == pytest.approx(closed.grad_d_local, rel=1e-13)
    assert (round(full[0], 6), round(detached[0], 6)) == (0.922412, -0.059601)
    assert d_grad("query_path_only") == [0.0, 0.0]


@pytest.mark.parametrize(
    "p, k, groups",
    [
        (1, 1, ((*co.POOL_SCHEMES, "remote_detached"),)),
        (2, 1, (("global_batch", "microstep_pool"), ("rank_pool", "microbatch_pool"))),
        (1, 3, (("global_batch", "rank_pool", "remote_detached"), co.POOL_SCHEMES[2:])),
        (2, 2, ()),
    ],
)
def test_identical_objectives_by_hand(p, k, groups):
    assert co.identical_objectives(p, k) == groups


@PROPERTY
@given(
    p=st.integers(1, 3),
    k=st.integers(1, 3),
    data=st.data(),
)
def test_identical_objectives_give_identical_gradients(p, k, data):
    sizes = [[data.draw(st.integers(1, 3)) for _ in range(k)] for _ in range(p)]
    grid = ref.pairs_grid(sizes, seed=data.draw(st.integers(0, 1000)))
    grads = co.candidate_gradients(
        ref.Dual(), grid, ref.info_nce_batch_loss, ref.embed, ref.embedding_loss
    )
    for group in co.identical_objectives(p, k):
        for scheme in group[1:]:
            assert_same(grads[scheme], grads[group[0]], rel=1e-12)


@PROPERTY
@given(n=st.integers(1, 5), seed=st.integers(0, 1000))
def test_one_microbatch_makes_every_pool_the_global_batch(n, seed):
    grid = ref.labelled_grid([[max(n, 2)]], seed)  # BatchNorm needs 2 items to train
    grads = co.candidate_gradients(ref.Classifier(), grid, ref.classifier_batch_loss)
    for scheme in co.POOL_SCHEMES[1:]:
        assert_same(grads[scheme], grads["global_batch"], rel=0)  # the very same computation


def vector_loss(model, microbatches):
    return torch.zeros(2, dtype=torch.float64)


def nan_loss(model, microbatches):
    return torch.tensor(float("nan"), dtype=torch.float64)


def float_loss(model, microbatches):
    return 1.0


def int_loss(model, microbatches):
    return torch.tensor(1)


def one_tensor(model, microbatch):
    return microbatch["a"]


@pytest.mark.parametrize(
    "scheme, grid, callables, field",
    [
        ("global_batch", [{"a": 1}, {"a": 2}], (ref.info_nce_batch_loss,), "microbatches"),
        ("global_batch", [[0, 1], [2]], (ref.info_nce_batch_loss,), "microbatches"),
        ("global_batch", [], (ref.info_nce_batch_loss,), "microbatches"),
        ("global_batch", [[0]], (vector_loss,), "batch_loss"),
        ("global_batch", [[0]], (nan_loss,), "batch_loss"),
        ("global_batch", [[0]], (float_loss,), "batch_loss"),
        ("global_batch", [[0]], (int_loss,), "batch_loss"),
        ("remote_detached", [[0]], (ref.info_nce_batch_loss,), "scheme"),
        ("global_batch", [[0]], (None,), "scheme"),
        ("global_sum", [[0]], (ref.info_nce_batch_loss,), "scheme"),
        ("global_batch", [[0]], (None, ref.embed), "embedding_loss"),
        ("global_batch", ref.pairs_grid([[2]]), (None, one_tensor, ref.embedding_loss), "embed"),
    ],
)
def test_bad_input_names_the_value(scheme, grid, callables, field):
    with pytest.raises(InvalidInput) as caught:
        co.candidate_gradient(scheme, ref.Dual(), grid, *callables)
    assert caught.value.field == field


def test_a_loss_that_needs_as_many_documents_as_queries_raises_its_own_error():
    """A symmetric (CLIP) loss cannot score a rank's queries against every document: the
    path candidates are then undefined, and the caller sees the loss's own error."""

    def symmetric(model, queries, documents):
        logits = queries @ documents.T
        labels = torch.arange(len(queries))
        ce = torch.nn.functional.cross_entropy
        return (ce(logits, labels) + ce(logits.T, labels)) / 2

    grid = ref.pairs_grid([[2], [2]])
    co.candidate_gradient("global_batch", ref.Dual(), grid, None, ref.embed, symmetric)
    with pytest.raises((ValueError, RuntimeError)):
        co.candidate_gradient("remote_detached", ref.Dual(), grid, None, ref.embed, symmetric)


CLIP_GRIDS = ([[2, 3], [2, 3]], [[3], [3]], [[2, 1, 3], [2, 1, 3], [2, 1, 3]])


@pytest.mark.parametrize("sizes", CLIP_GRIDS)
@pytest.mark.parametrize("scheme", co.NAMED_SCHEMES)
def test_symmetric_candidates_match_a_clip_loss_written_out(sizes, scheme):
    """symmetric=True, embedding_loss one direction: every candidate (the paths in each
    direction) against the CLIP objective built by hand with explicit detaches."""
    grid = ref.pairs_grid(sizes)
    want = ref.reference_gradient(ref.Dual, lambda m: ref.clip_objective(scheme, m, grid))
    got = co.candidate_gradient(
        scheme, ref.Dual(), grid, None, ref.embed, ref.clip_direction, symmetric=True
    )
    assert_same(got, want)


def test_symmetric_batch_loss_is_the_mean_of_both_directions():
    grid = ref.pairs_grid([[2, 3], [2, 3]])
    loss = co.embedding_batch_loss(ref.embed, ref.clip_direction, symmetric=True)
    model = ref.Dual()
    pool = [m for row in grid for m in row]
    got = loss(model, pool)
    want = ref.clip_objective("global_batch", model, grid)
    assert float(abs(got - want)) <= 1e-14
    # and one direction alone is not it
    one = co.embedding_batch_loss(ref.embed, ref.clip_direction)(model, pool)
    assert float(abs(one - want)) > 1e-3


def test_symmetric_paths_differ_from_each_other_and_the_pools():
    grid = ref.pairs_grid([[3], [3]])
    grads = co.candidate_gradients(
        ref.Dual(), grid, None, ref.embed, ref.clip_direction, symmetric=True
    )
    assert list(grads) == list(co.NAMED_SCHEMES)
    for s in ("remote_detached", "query_path_only"):
        for t in ("global_batch", "rank_pool", "remote_detached"):
            if s != t:
                assert apart(grads[s], grads[t]) > 1e-3, (s, t)
    # both towers train as queries: no tower is left without gradient
    assert float(grads["query_path_only"]["wd"].abs().max()) > 1e-3
    # the temperature's gradient is the global batch's (every rank's whole loss reaches it)
    want = float(grads["global_batch"]["log_tau"])
    assert float(grads["query_path_only"]["log_tau"]) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("flag", [1, "yes", None])
def test_symmetric_must_be_a_bool(flag):
    grid = ref.pairs_grid([[2], [2]])
    with pytest.raises(InvalidInput) as caught:
        co.candidate_gradient(
            "query_path_only", ref.Dual(), grid, None, ref.embed, ref.clip_direction, flag
        )
    assert caught.value.field == "symmetric"


def test_frozen_and_unreached_parameters_get_zero_gradients():
    model = ref.Dual()
    model.unused = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    model.wd.requires_grad_(False)
    grid = ref.pairs_grid([[2], [2]])
    grads = co.candidate_gradient("global_batch", model, grid, ref.info_nce_batch_loss)
    assert list(grads) == ["wq", "wd", "log_tau", "unused"]
    assert not grads["wd"].any() and not grads["unused"].any() and grads["wq"].any()


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    grid=fuzz.junk,
    p=fuzz.sizes,
    k=fuzz.sizes,
    scheme=st.one_of(st.sampled_from(co.NAMED_SCHEMES), fuzz.scalars),
)
def test_hostile_layouts_and_counts_are_refused_by_name(grid, p, k, scheme):
    """As tests/core/test_fuzz_all.py: a ValueError or TypeError saying what was wrong.
    Microbatches are opaque to the core (only the user's callables read them): a layout
    keeps them as given, rows of equal length."""
    shaped = fuzz.outcome(co.layout, grid)
    assert shaped is None or len({len(row) for row in shaped}) == 1 and len(shaped[0]) >= 1
    groups = fuzz.clean(co.identical_objectives, p, k)
    assert groups is None or all(set(g) <= set(co.NAMED_SCHEMES) for g in groups)
    pooled = fuzz.outcome(co.pools, scheme, grid)
    assert pooled is None or scheme in co.POOL_SCHEMES and shaped is not None
