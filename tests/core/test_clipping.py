"""core.clipping against closed forms and torch's own clipping on a single process.

The torch reference holds every independent parameter exactly once (a plain nn.Module, whose
`.parameters()` de-duplicates tied weights) and clips with torch.nn.utils.clip_grad_norm_.
torch divides by (n + 1e-6); core uses no epsilon, so clipped values are compared within
the bound that epsilon implies: |g| * tau * 1e-6 / n^2.
"""

import math
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pclab.core import clipping
from pclab.core.validation import InvalidInput

torch.set_default_dtype(torch.float64)
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TORCH_EPS = 1e-6


# ---------------------------------------------------------------- the seed's figures


def test_seed_two_shards():
    report = clipping.clip_report([{"w0": 24.0}, {"w1": 32.0}], 1.0, scale=8.0)
    assert report.unscaled == ({"w0": 3.0}, {"w1": 4.0})
    assert report.global_norm == 5.0
    assert report.coefficient == pytest.approx(0.2, rel=1e-15)
    assert report.clipped == pytest.approx({"w0": 0.6, "w1": 0.8}, rel=1e-15)
    assert report.params_after == pytest.approx({"w0": 0.94, "w1": 0.92}, rel=1e-15)
    assert report.per_rank_clipped == ({"w0": 1.0}, {"w1": 1.0})
    assert report.applied_norms["per_rank"] == pytest.approx(math.sqrt(2), rel=1e-15)
    assert report.applied_norms["global"] == pytest.approx(1.0, rel=1e-15)
    assert report.skip is False and report.step_after == 1


def test_seed_replicated_twelve():
    report = clipping.clip_report(clipping.scenario_grads("seed_replicated", 8.0), 1.0, scale=8.0)
    assert report.owners == {"w0": 0, "shared": 0, "w1": 1}
    assert report.global_norm == pytest.approx(13.0, rel=1e-15)
    assert report.double_counted_norm == pytest.approx(math.sqrt(313), rel=1e-15)
    assert report.owned_square_sums == pytest.approx((9.0 + 144.0, 16.0), rel=1e-15)
    # Both copies of `shared` take the same step; rank 1's copy is not counted.
    steps = report.outcomes["global"]
    assert (
        steps[0].params["shared"] == steps[1].params["shared"] == pytest.approx(1 - 0.1 * 12 / 13)
    )
    assert report.diverged == {
        "global": False,
        "per_rank": True,  # sqrt(153) on rank 0, sqrt(160) on rank 1: two different `shared`
        "double_counted": False,
        "before_unscale": False,
        "local_skip": False,
    }


def test_clipping_before_unscaling_shrinks_the_threshold_to_tau_over_scale():
    report = clipping.clip_report(clipping.scenario_grads("seed", 8.0), 1.0, scale=8.0)
    assert report.scaled_norm == 40.0
    assert report.applied_norms["before_unscale"] == pytest.approx(1.0 / 8.0, rel=1e-15)


def test_zero_gradients_keep_coefficient_one():
    report = clipping.clip_report([{"a": 0.0}, {"a": 0.0, "b": -0.0}], 0.0)
    assert report.global_norm == 0.0 and report.coefficient == 1.0
    assert clipping.clip_coefficient(0.0, 0.0) == 1.0
    assert clipping.clip_coefficient(2.0, 0.0) == 0.0
    assert clipping.clip_coefficient(None, 1.0) is None


def test_threshold_sweep_pins_closed_form_points():
    report = clipping.clip_report(clipping.scenario_grads("seed", 8.0), 1.0, scale=8.0)
    rows = clipping.threshold_sweep(
        report, max_threshold=10.0, points=5
    )  # tau = 0, 2.5, 5, 7.5, 10
    correct = [r["coefficient"] for r in rows if r["norm"] == "global"]
    assert correct == [0.0, 0.5, 1.0, 1.0, 1.0]
    scaled = [r["coefficient"] for r in rows if r["norm"] == "before_unscale"]
    assert scaled == [0.0, 2.5 / 40, 5 / 40, 7.5 / 40, 10 / 40]
    assert {r["norm"] for r in rows} == {
        "global",
        "double_counted",
        "before_unscale",
        "per_rank_0",
        "per_rank_1",
    }


def test_protocol_marks_name_the_broken_step():
    finite = clipping.clip_report(clipping.scenario_grads("seed_replicated", 8.0), 1.0, scale=8.0)
    assert clipping.protocol_marks(finite, "global") == dict.fromkeys(clipping.PROTOCOL, "ok")
    assert clipping.protocol_marks(finite, "per_rank")["reduce"] == "wrong"
    assert clipping.protocol_marks(finite, "before_unscale")["unscale"] == "wrong"
    assert clipping.protocol_marks(finite, "local_skip")["agree"] == "latent"  # all finite: hidden
    overflow = clipping.clip_report(
        clipping.scenario_grads("seed_replicated", 8.0, inject=(1, "w1", "inf")), 1.0, scale=8.0
    )
    assert clipping.protocol_marks(overflow, "global") == {
        "unscale": "ok",
        "agree": "ok",
        "reduce": "skipped",
        "update": "skipped",
    }
    assert clipping.protocol_marks(overflow, "local_skip")["agree"] == "wrong"
    assert overflow.diverged["local_skip"] and not overflow.diverged["global"]


# ---------------------------------------------------------------- the coordinated skip


@pytest.mark.parametrize("kind", ["inf", "nan"])
@pytest.mark.parametrize("target", [(0, "w0"), (1, "w1"), (1, "shared")])
def test_any_non_finite_copy_skips_every_rank_and_keeps_state(kind, target):
    grads = clipping.scenario_grads("seed_replicated", 8.0, inject=(*target, kind))
    params = {"w0": 0.5, "shared": -2.0, "w1": 3.0}
    buffers = {"w0": 0.25, "shared": -1.0}
    report = clipping.clip_report(
        grads, 1.0, 8.0, 0.1, params, momentum=0.9, momentum_buffers=buffers, step=7
    )
    assert report.skip and report.global_norm is None and report.clipped is None
    assert (
        report.params_after == params
        and report.momentum_after == buffers
        and report.step_after == 7
    )
    for name in ("global", "per_rank", "double_counted", "before_unscale"):
        assert all(s.skip and s.step == 7 and s.applied is None for s in report.outcomes[name])
    # A copy on rank 1 that rank 1 does not own still stops everyone: flags cover what a rank holds.
    assert report.nonfinite[target[0]]


def test_scaled_finite_gradient_that_overflows_when_unscaled_skips():
    report = clipping.clip_report([{"a": 1e308}], 1.0, scale=1e-10)
    assert report.skip and report.unscaled[0]["a"] == math.inf


# ---------------------------------------------------------------- torch reference, random layouts


def random_layout(seed: int, ranks: int):
    """A model's gradients spread over ranks: some tensors sharded element-wise across ranks,
    some replicated on a random subset, one tied tensor used twice in the forward pass."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Parameter(torch.randn(rng.randint(2, 5), generator=gen))
            self.hidden = torch.nn.Parameter(torch.randn(rng.randint(1, 6), generator=gen))
            self.bias = torch.nn.Parameter(torch.randn(1, generator=gen))
            self.head = self.embed  # tied: one tensor, two uses

        def forward(self, x):
            return (
                (self.embed * x[: len(self.embed)]).sum() * (self.hidden**2).sum()
                + self.head.pow(3).sum()
            ) * (self.bias**2).sum()

    model = Model()
    model(torch.randn(8, generator=gen) * rng.choice([1e-3, 1.0, 1e3])).backward()
    params = dict(model.named_parameters())  # de-duplicated: `head` is `embed`
    assert set(params) == {"embed", "hidden", "bias"}
    scale = rng.choice([1.0, 8.0, 65536.0, 3.0])
    rank_grads = [{} for _ in range(ranks)]
    for name, p in params.items():
        sharded = rng.random() < 0.5
        holders = sorted(rng.sample(range(ranks), rng.randint(1, ranks)))
        for k, g in enumerate(p.grad.tolist()):
            for r in [rng.randrange(ranks)] if sharded else holders:
                rank_grads[r][f"{name}[{k}]"] = g * scale
    return model, params, rank_grads, scale


@pytest.mark.parametrize("seed", range(12))
def test_matches_clip_grad_norm_on_the_deduplicated_model(seed):
    model, params, rank_grads, scale = random_layout(seed, ranks=1 + seed % 4)
    unscaled = {name: p.grad.clone() for name, p in params.items()}
    max_norm = [0.0, 1e-3, 0.5, 2.0, 1e6][seed % 5]
    momentum = [0.0, 0.9][seed % 2]
    initial = {
        f"{name}[{k}]": x for name, p in params.items() for k, x in enumerate(p.detach().tolist())
    }
    report = clipping.clip_report(rank_grads, max_norm, scale, 0.1, initial, momentum=momentum)

    for p in model.parameters():  # the same rounding as the ranks' scaled copies, unscaled
        p.grad.mul_(scale).div_(scale)
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    assert report.global_norm == pytest.approx(total.item(), rel=1e-12)
    n = report.global_norm
    assert n > 0
    # torch's coefficient differs from core's by at most c * eps / n (its 1e-6 in the denominator).
    slack = min(1.0, max_norm / n) * TORCH_EPS / n
    for name, p in params.items():
        for k, g in enumerate(p.grad.tolist()):
            assert (
                abs(report.clipped[f"{name}[{k}]"] - g)
                <= abs(unscaled[name][k].item()) * slack + 1e-15
            )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    optimizer.step()
    biggest = max(abs(g) for t in unscaled.values() for g in t.tolist())
    for name, p in params.items():
        for k, x in enumerate(p.detach().tolist()):
            assert report.params_after[f"{name}[{k}]"] == pytest.approx(
                x, abs=0.1 * biggest * slack + 1e-15
            )


def test_passing_a_tied_tensor_twice_double_counts_like_replicated_copies():
    _, params, _, _ = random_layout(3, ranks=1)
    embed = params["embed"]
    once = torch.nn.utils.get_total_norm([p.grad for p in params.values()]).item()
    twice = torch.nn.utils.get_total_norm([p.grad for p in params.values()] + [embed.grad]).item()
    grads = {f"{n}[{k}]": g for n, p in params.items() for k, g in enumerate(p.grad.tolist())}
    tied = {k: g for k, g in grads.items() if k.startswith("embed")}
    report = clipping.clip_report([grads, tied], 1.0)
    assert report.global_norm == pytest.approx(once, rel=1e-12)
    assert report.double_counted_norm == pytest.approx(twice, rel=1e-12)


def test_momentum_history_matches_torch_sgd():
    grads = [{"a": 3.0, "b": -4.0}, {"b": -4.0, "c": 12.0}]
    buffers = {"a": 0.5, "b": -0.25}  # "c" has no history yet: torch starts its buffer at g
    report = clipping.clip_report(
        grads,
        2.0,
        1.0,
        0.05,
        {"a": 1.0, "b": 2.0, "c": -1.0},
        momentum=0.8,
        momentum_buffers=buffers,
    )
    theta = {
        k: torch.nn.Parameter(torch.tensor(v)) for k, v in {"a": 1.0, "b": 2.0, "c": -1.0}.items()
    }
    optimizer = torch.optim.SGD(theta.values(), lr=0.05, momentum=0.8)
    for k, p in theta.items():
        p.grad = torch.tensor({"a": 3.0, "b": -4.0, "c": 12.0}[k])
        if k in buffers:
            optimizer.state[p]["momentum_buffer"] = torch.tensor(buffers[k])
    torch.nn.utils.clip_grad_norm_(theta.values(), 2.0)
    optimizer.step()
    tol = 0.05 * 2.0 * TORCH_EPS / 13.0 * 2
    for k, p in theta.items():
        assert report.params_after[k] == pytest.approx(p.item(), abs=tol)
        assert report.momentum_after[k] == pytest.approx(
            optimizer.state[p]["momentum_buffer"].item(), abs=tol * 20
        )


# ---------------------------------------------------------------- properties

finite_grads = st.floats(
    min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False, allow_subnormal=False
)


@st.composite
def layouts(draw):
    """Random ids, each either a shard on one rank or replicated on a subset of ranks."""
    ranks = draw(st.integers(1, 4))
    values = draw(st.lists(finite_grads, min_size=0, max_size=8))
    rank_grads = [{} for _ in range(ranks)]
    for i, g in enumerate(values):
        holders = draw(st.sets(st.integers(0, ranks - 1), min_size=1))
        for r in holders:
            rank_grads[r][f"p{i}"] = g
    return rank_grads


@PROPERTY
@given(layouts(), st.floats(0, 1e6))
def test_norm_counts_each_id_once_like_hypot(rank_grads, tau):
    report = clipping.clip_report(rank_grads, tau)
    distinct = {j: g for grads in rank_grads for j, g in grads.items()}
    assert report.global_norm == pytest.approx(
        math.hypot(*distinct.values()), rel=1e-14, abs=1e-300
    )
    assert 0.0 <= report.coefficient <= 1.0
    assert (report.coefficient == 1.0) == (report.global_norm <= tau)
    if report.global_norm > 0:
        assert report.applied_norms["global"] == pytest.approx(
            min(report.global_norm, tau), rel=1e-12
        )
    assert report.double_counted_norm >= report.global_norm * (1 - 1e-15)
    assert not report.diverged["global"]


@PROPERTY
@given(layouts(), st.floats(0, 100), st.sampled_from([2.0, 1024.0, 65536.0]))
def test_scale_invariance(rank_grads, tau, factor):
    plain = clipping.clip_report(rank_grads, tau, 1.0)
    scaled = [{j: g * factor for j, g in grads.items()} for grads in rank_grads]
    report = clipping.clip_report(scaled, tau, factor)  # powers of two: exact
    assert report.global_norm == plain.global_norm and report.params_after == plain.params_after


@PROPERTY
@given(layouts(), st.floats(0, 100), st.randoms())
def test_adding_replicas_or_reordering_ranks_changes_nothing_that_counts(rank_grads, tau, rnd):
    base = clipping.clip_report(rank_grads, tau)
    more = [dict(grads) for grads in rank_grads] + [{}]
    for grads in rank_grads:
        for j, g in grads.items():
            if rnd.random() < 0.5:
                more[-1][j] = g  # one more replicated copy, on a new rank
    rnd.shuffle(more)
    other = clipping.clip_report(more, tau)
    assert other.global_norm == pytest.approx(base.global_norm, rel=1e-15, abs=1e-300)
    assert other.params_after == pytest.approx(base.params_after, rel=1e-15, abs=1e-14)


@PROPERTY
@given(layouts(), st.integers(0, 3), st.sampled_from([math.inf, -math.inf, math.nan]))
def test_non_finite_anywhere_leaves_state_identical(rank_grads, where, bad):
    target = rank_grads[where % len(rank_grads)]
    target["bad"] = bad
    params = {j: float(i) for i, j in enumerate({j for g in rank_grads for j in g})}
    buffers = {j: -x for j, x in params.items() if len(j) % 2}
    report = clipping.clip_report(
        rank_grads, 1.0, 2.0, 0.3, params, momentum=0.5, momentum_buffers=buffers, step=4
    )
    assert report.skip
    assert (report.params_after, report.momentum_after, report.step_after) == (params, buffers, 4)


@PROPERTY
@given(
    st.lists(st.floats(min_value=-1.7e308, max_value=1.7e308), min_size=1, max_size=6),
    st.integers(1, 3),
)
def test_huge_finite_gradients_give_the_representable_norm(values, ranks):
    rank_grads = [{} for _ in range(ranks)]
    for i, g in enumerate(values):
        rank_grads[i % ranks][f"p{i}"] = g
    exact = math.hypot(*values)  # overflow-safe and correctly rounded: an independent closed form
    report = clipping.clip_report(rank_grads, 1.0)
    assert not report.skip
    if math.isfinite(exact) and exact < 1.7e308:
        assert math.isfinite(report.global_norm)
        assert report.global_norm == pytest.approx(exact, rel=1e-14, abs=1e-300)
    else:
        assert report.global_norm >= 1.7e308


# ---------------------------------------------------------------- every ValueError / TypeError path


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_norm": -1.0},
        {"max_norm": math.nan},
        {"max_norm": math.inf},
        {"scale": 0.0},
        {"scale": -8.0},
        {"scale": math.inf},
        {"scale": math.nan},
        {"lr": -0.1},
        {"momentum": -0.5},
        {"step": -1},
        {"step": 1.5},
        {"params": {"zz": 1.0}},
        {"params": {"a": math.nan}},
        {"momentum_buffers": {"a": math.inf}},
        {"rank_grads": []},
        {"rank_grads": "ab"},
        {"rank_grads": {"a": 1.0}},
        {"rank_grads": [{"a": 1.0}, {"a": 2.0}]},  # a replicated copy that was never synchronised
    ],
)
def test_invalid_input_raises_value_error_naming_it(kwargs):
    call = {"rank_grads": [{"a": 1.0}], "max_norm": 1.0} | kwargs
    with pytest.raises(ValueError) as info:
        clipping.clip_report(**call)
    assert isinstance(info.value, InvalidInput)


@pytest.mark.parametrize(
    "rank_grads, extra",
    [
        ([["a"]], {}),
        ([{"a": "1"}], {}),
        ([{"a": True}], {}),
        ([{"a": None}], {}),
        ([{"a": 1.0}], {"params": [1.0]}),
    ],
)
def test_not_a_number_raises_type_error(rank_grads, extra):
    with pytest.raises(TypeError):
        clipping.clip_report(rank_grads, 1.0, **extra)


@pytest.mark.parametrize(
    "call",
    [
        lambda: clipping.scenario_grads("nope"),
        lambda: clipping.scenario_grads("seed", 0.0),
        lambda: clipping.scenario_grads("seed", extra_sharded=((2, "x", 1.0),)),
        lambda: clipping.scenario_grads("seed", extra_replicated=(("x", math.nan),)),
        lambda: clipping.scenario_grads("seed", inject=(0, "w1", "inf")),  # rank 0 does not hold w1
        lambda: clipping.scenario_grads("seed", inject=(0, "w0", "overflow")),
        lambda: clipping.threshold_sweep(clipping.clip_report([{"a": 1.0}], 1.0), points=1),
        lambda: clipping.threshold_sweep(clipping.clip_report([{"a": 1.0}], 1.0), points=10_000),
        lambda: clipping.threshold_sweep(
            clipping.clip_report([{"a": 1.0}], 1.0), max_threshold=0.0
        ),
        lambda: clipping.protocol_marks(clipping.clip_report([{"a": 1.0}], 1.0), "mean"),
        lambda: clipping.clip_coefficient(1.0, -1.0),
    ],
)
def test_helpers_reject_bad_values(call):
    with pytest.raises(ValueError):
        call()


# ---------------------------------------------------------------- fuzzing with hostile input

junk = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1.7e308, max_value=1.7e308),
    st.floats(min_value=-1e-310, max_value=1e-310),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.none(),
    st.text(max_size=2),
    st.booleans(),
    st.lists(st.floats(), max_size=2),
)
ids = st.one_of(st.sampled_from(["a", "b", "c"]), st.integers(0, 2))
rank_maps = st.dictionaries(ids, junk, max_size=4)
hostile_ranks = st.one_of(st.lists(rank_maps, max_size=4), st.lists(junk, max_size=3), junk)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_ranks, junk, junk, junk)
def test_fuzz_only_value_or_type_errors(rank_grads, max_norm, scale, lr):
    try:
        report = clipping.clip_report(rank_grads, max_norm, scale, lr)
    except (ValueError, TypeError) as exc:
        assert str(exc)
        return
    values = [g for grads in report.unscaled for g in grads.values()]
    assert report.skip == (not all(math.isfinite(g) for g in values))
    if report.skip:
        assert report.global_norm is None and report.step_after == 0
    else:
        assert report.global_norm is not None and report.global_norm >= 0
        assert 0.0 <= report.coefficient <= 1.0
