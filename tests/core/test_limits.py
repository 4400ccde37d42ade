"""Section 04's demonstrations against independent computations.

core.limits / core.gradcache / core.trajectory run each breaking factor in torch; every
test here recomputes the same quantity another way: numpy closed forms, a freshly built
torch.nn.BatchNorm1d, torch.nn.utils.clip_grad_norm_, plain full-pool autograd written
with an explicit log-sum-exp, math.fsum and explicit torch.Generator streams.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pclab.core import gradcache, limits, limits_clip, trajectory
from pclab.core.validation import InvalidInput


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only contend on a shared 2-core box (25x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 10_000)


# ---------------------------------------------------------------- 1 window update


def numpy_window(steps, size, lr, reg, seed, step_inside=False, reg_each=False):
    """Plain numpy SGD over the microbatches: the closed-form gradient of each term."""
    x, y, w = (t.numpy().copy() for t in limits.regression_data(steps * size, seed))
    n, grad = steps * size, np.zeros_like(w)
    for k in range(steps):
        xk, yk = x[k * size : (k + 1) * size], y[k * size : (k + 1) * size]
        g = xk.T @ (xk @ w - yk) / n + (reg * w if (reg_each or k == 0) else 0)
        if step_inside:
            w = w - lr * g
        else:
            grad += g
    return w if step_inside else w - lr * grad


def test_window_defaults_match_closed_forms():
    result = limits.window_update()
    large = numpy_window(1, 16, 0.1, 0.05, 0)
    np.testing.assert_allclose(result.params["large_batch"], large, rtol=0, atol=1e-15)
    np.testing.assert_allclose(result.params["accumulate"], large, rtol=0, atol=1e-14)
    inside = numpy_window(4, 4, 0.1, 0.05, 0, step_inside=True)
    np.testing.assert_allclose(result.params["step_inside"], inside, rtol=0, atol=1e-14)
    assert result.difference == pytest.approx(np.abs(inside - large).max(), abs=1e-14)
    assert result.difference > 1e-3  # the slip is visible at the defaults
    w0 = limits.regression_data(16, 0)[2].numpy()
    expected = large - 0.1 * 3 * 0.05 * w0  # (K - 1) extra copies of lr * lambda * w0
    np.testing.assert_allclose(result.params["reg_every_microstep"], expected, rtol=0, atol=1e-14)


@PROPERTY
@given(
    steps=st.integers(1, 8),
    size=st.integers(1, 6),
    lr=st.floats(1e-3, 1.0),
    reg=st.floats(0, 1.0),
    seed=seeds,
)
def test_window_properties(steps, size, lr, reg, seed):
    result = limits.window_update(steps, size, lr, reg, seed)
    assert result.max_param_diff["accumulate"] <= 1e-12
    reg_gap = (
        (steps - 1) * lr * reg * np.abs(limits.regression_data(steps * size, seed)[2].numpy()).max()
    )
    assert result.max_param_diff["reg_every_microstep"] == pytest.approx(reg_gap, abs=1e-12)
    inside = numpy_window(steps, size, lr, reg, seed, step_inside=True)
    np.testing.assert_allclose(result.params["step_inside"], inside, rtol=1e-12, atol=1e-12)
    if steps == 1:
        assert result.difference == 0.0


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"accum_steps": 0}, "accum_steps"),
        ({"accum_steps": 33}, "accum_steps"),
        ({"accum_steps": 2.5}, "accum_steps"),
        ({"microbatch_size": 0}, "microbatch_size"),
        ({"lr": 0.0}, "lr"),
        ({"lr": math.inf}, "lr"),
        ({"reg": -0.1}, "reg"),
        ({"seed": -1}, "seed"),
    ],
)
def test_window_rejects_bad_input(kwargs, field):
    with pytest.raises(InvalidInput, match=f"^{field}="):
        limits.window_update(**kwargs)
    with pytest.raises(TypeError):
        limits.window_update(lr="fast")


# ---------------------------------------------------------------- 2 BatchNorm


def manual_norm_objective(data, parts, stats):
    """The split objective written out: batch statistics per part (or fixed ones)."""
    weight = data["weight"].clone().requires_grad_(True)
    bias = data["bias"].clone().requires_grad_(True)
    head = data["head"].clone().requires_grad_(True)
    size, total, preds = len(data["x"]), 0.0, []
    for xk, tk in zip(data["x"].tensor_split(parts), data["targets"].tensor_split(parts)):
        if stats == "batch":
            mean, var = xk.mean(0), xk.var(0, unbiased=False)
        elif stats == "running":
            mean, var = torch.zeros(3, dtype=xk.dtype), torch.ones(3, dtype=xk.dtype)
        else:  # per sample over features: LayerNorm
            mean, var = xk.mean(1, keepdim=True), xk.var(1, unbiased=False, keepdim=True)
        pred = ((xk - mean) / torch.sqrt(var + 1e-5) * weight + bias) @ head
        preds.append(pred.detach())
        total = total + 0.5 * ((pred - tk) ** 2).sum() / size
    total.backward()
    return torch.cat(preds), torch.cat([weight.grad, bias.grad, head.grad])


def test_batchnorm_full_batch_matches_torch_batchnorm1d():
    result = limits.batchnorm_split(8, 2, 0)
    data = limits.norm_data(8, 0)
    bn = torch.nn.BatchNorm1d(3).double().train()
    with torch.no_grad():
        bn.weight.copy_(data["weight"])
        bn.bias.copy_(data["bias"])
        np.testing.assert_allclose(
            result.pred_full, (bn(data["x"]) @ data["head"]).numpy(), atol=1e-13
        )
    np.testing.assert_allclose(result.running_mean_full, bn.running_mean.numpy(), atol=1e-15)


@PROPERTY
@given(size=st.integers(2, 24), steps=st.integers(1, 12), seed=seeds)
def test_batchnorm_split_matches_written_out_statistics(size, steps, seed):
    steps = min(steps, size // 2)
    result = limits.batchnorm_split(size, steps, seed)
    data = limits.norm_data(size, seed)
    rows = {r["variant"]: r for r in result.rows}
    for variant, stats in (
        ("batchnorm_train", "batch"),
        ("batchnorm_eval", "running"),
        ("layernorm", "sample"),
    ):
        pred_full, grad_full = manual_norm_objective(data, 1, stats)
        pred_split, grad_split = manual_norm_objective(data, steps, stats)
        gap = (grad_full - grad_split).abs().max().item()
        assert rows[variant]["max_grad_diff"] == pytest.approx(gap, abs=1e-12)
        assert rows[variant]["max_output_diff"] == pytest.approx(
            (pred_full - pred_split).abs().max().item(), abs=1e-12
        )
        if variant == "batchnorm_train":
            np.testing.assert_allclose(result.pred_split, pred_split.numpy(), atol=1e-12)
    assert (
        rows["batchnorm_eval"]["max_grad_diff"] <= 1e-12
        and rows["layernorm"]["max_grad_diff"] <= 1e-12
    )
    # Running mean: one momentum-0.1 update per microbatch, from zero.
    running = np.zeros(3)
    for xk in data["x"].tensor_split(steps):
        running = 0.9 * running + 0.1 * xk.mean(0).numpy()
    np.testing.assert_allclose(result.running_mean_split, running, atol=1e-14)


def test_batchnorm_default_difference_is_visible_and_bad_input_named():
    assert limits.batchnorm_split().difference > 1e-2
    assert limits.batchnorm_split(8, 1).difference == 0.0
    with pytest.raises(InvalidInput, match="^accum_steps=5"):
        limits.batchnorm_split(8, 5)  # a microbatch of one sample has no variance
    with pytest.raises(InvalidInput, match="^batch_size=1"):
        limits.batchnorm_split(1, 1)


# ---------------------------------------------------------------- 3 clipping


def torch_clip(g: np.ndarray, max_norm: float) -> np.ndarray:
    p = torch.nn.Parameter(torch.zeros(len(g), dtype=torch.float64))
    p.grad = torch.tensor(g, dtype=torch.float64)
    torch.nn.utils.clip_grad_norm_([p], max_norm)
    return p.grad.numpy()


@PROPERTY
@given(steps=st.integers(1, 8), dim=st.integers(1, 6), tau=st.floats(0.0, 20.0), seed=seeds)
def test_clip_against_clip_grad_norm(steps, dim, tau, seed):
    result = limits_clip.clip_split(steps, dim, tau, seed)
    grads = np.array(result.grads)
    # torch adds 1e-6 to the norm in its coefficient; the lab's rule is exact, hence the tolerance.
    np.testing.assert_allclose(
        result.clip_of_sum, torch_clip(grads.sum(0), tau), rtol=1e-5, atol=1e-6
    )
    summed = sum(torch_clip(g, tau) for g in grads)
    np.testing.assert_allclose(result.sum_of_clips, summed, rtol=1e-5, atol=1e-6 * steps)
    assert np.linalg.norm(result.clip_of_sum) == pytest.approx(
        min(np.linalg.norm(grads.sum(0)), tau), abs=1e-12
    )
    assert np.linalg.norm(result.sum_of_clips) <= steps * tau + 1e-12
    if tau >= np.linalg.norm(grads, axis=1).max() and tau >= np.linalg.norm(grads.sum(0)):
        assert result.difference <= 1e-12  # nothing clipped: the two orders agree


def test_clip_defaults_differ_and_bad_input_named():
    result = limits_clip.clip_split()
    rows = {r["variant"]: r for r in result.rows}
    assert rows["clip_of_sum"]["norm"] == pytest.approx(1.0)
    assert rows["sum_of_clips"]["norm"] > 1.0 and result.difference > 0.1
    with pytest.raises(InvalidInput, match="^max_norm=-1"):
        limits_clip.clip_split(max_norm=-1)
    with pytest.raises(InvalidInput, match="^dim=0"):
        limits_clip.clip_split(dim=0)


# ---------------------------------------------------------------- in-batch negatives


def full_pool_grads(batch_size, seed, tau):
    """Plain autograd of the full-pool objective, log-softmax written with logsumexp."""
    net = gradcache.encoder(seed)
    a, b = gradcache.pairs(batch_size, seed)
    q, d = net(a), net(b)
    logits = q @ d.T / tau
    loss = (torch.logsumexp(logits, dim=1) - logits.diagonal()).mean()
    loss.backward()
    return loss.item(), torch.cat([p.grad.reshape(-1) for p in net.parameters()]).numpy()


def per_microbatch_loss(batch_size, steps, seed, tau):
    net = gradcache.encoder(seed)
    a, b = gradcache.pairs(batch_size, seed)
    total = 0.0
    with torch.no_grad():
        for xa, xb in zip(a.tensor_split(steps), b.tensor_split(steps)):
            s = (net(xa) @ net(xb).T / tau).numpy()
            m = s.max(1, keepdims=True)
            total += float((np.log(np.exp(s - m).sum(1)) + m[:, 0] - np.diag(s)).sum())
    return total / batch_size


@PROPERTY
@given(size=st.integers(2, 16), steps=st.integers(1, 16), tau=st.floats(0.1, 5.0), seed=seeds)
def test_gradient_cache_recovers_the_full_pool(size, steps, tau, seed):
    steps = min(steps, size)
    result = negatives = gradcache.negatives_split(size, steps, tau, seed)
    loss, grads = full_pool_grads(size, seed, tau)
    rows = {r["variant"]: r for r in result.rows}
    np.testing.assert_allclose(negatives.grads["full_pool"], grads, rtol=0, atol=1e-12)
    np.testing.assert_allclose(negatives.grads["gradient_cache"], grads, rtol=0, atol=1e-12)
    assert rows["gradient_cache"]["loss"] == pytest.approx(loss, abs=1e-12)
    assert rows["per_microbatch"]["loss"] == pytest.approx(
        per_microbatch_loss(size, steps, seed, tau), abs=1e-12
    )
    assert result.cache_difference <= 1e-12
    # One microbatch's encoder graph at a time: saved activations scale with the largest part.
    largest = len(torch.arange(size).tensor_split(steps)[0])
    assert (
        rows["gradient_cache"]["encoder_saved"] * size
        == rows["full_pool"]["encoder_saved"] * largest
    )
    if steps == 1:
        assert result.difference <= 1e-15


def test_negatives_defaults():
    result = gradcache.negatives_split()
    rows = {r["variant"]: r for r in result.rows}
    assert [rows[v]["negatives_per_query"] for v in gradcache.NEGATIVE_VARIANTS] == [7, 3, 7]
    assert result.difference > 0.1 and result.cache_difference <= 1e-12
    assert rows["gradient_cache"]["encoder_saved"] < rows["full_pool"]["encoder_saved"]
    with pytest.raises(InvalidInput, match="^accum_steps=9"):
        gradcache.negatives_split(8, 9)
    with pytest.raises(InvalidInput, match="^tau=0"):
        gradcache.negatives_split(tau=0)


# ---------------------------------------------------------------- summation order


def python_float32_sum(values) -> float:
    total = np.float32(0)
    for x in values:
        total = np.float32(total + np.float32(x))
    return float(total)


def test_summation_small_cases_against_python_loops():
    result = trajectory.summation_order(500, 3, 7)
    x = trajectory.summands(500, 7)
    assert result.exact == math.fsum(float(v) for v in x)
    assert result.sums["sequential"] == python_float32_sum(x)
    assert result.sums["reversed"] == python_float32_sum(x[::-1])
    partials = [python_float32_sum(s) for s in np.array_split(x, 3)]
    assert result.sums["replica_partials"] == python_float32_sum(partials)


def test_summation_defaults_show_order_dependence():
    result = trajectory.summation_order()
    values = [r["value"] for r in result.rows if r["variant"] != "float64"]
    assert result.distinct_results == len(set(values)) >= 2
    assert result.difference == max(values) - min(values) > 0
    assert abs(result.float64 - result.exact) < min(
        abs(v - result.exact) for v in values if v != result.exact
    )


@PROPERTY
@given(count=st.integers(2, 3000), replicas=st.integers(1, 64), seed=seeds)
def test_summation_error_bounds(count, replicas, seed):
    replicas = min(replicas, count)
    result = trajectory.summation_order(count, replicas, seed)
    x = trajectory.summands(count, seed).astype(np.float64)
    magnitude = math.fsum(abs(v) for v in x)
    exact = math.fsum(x)
    assert result.exact == exact
    gamma32 = (count - 1) * 2.0**-24 / (1 - (count - 1) * 2.0**-24)
    for name, value in result.sums.items():
        assert abs(value - exact) <= gamma32 * magnitude + 2.0**-24 * abs(exact), name
    gamma64 = (count - 1) * 2.0**-53 / (1 - (count - 1) * 2.0**-53)
    assert abs(result.float64 - exact) <= gamma64 * magnitude


def test_summation_bad_input():
    with pytest.raises(InvalidInput, match="^count=1"):
        trajectory.summation_order(1)
    with pytest.raises(InvalidInput, match="^replicas=11"):
        trajectory.summation_order(10, 11)


# ---------------------------------------------------------------- dropout


def explicit_masks(parts, features, p, seed, reseed):
    """The masks F.dropout draws, rebuilt with explicit generators and bernoulli_."""
    gen, chunks = torch.Generator().manual_seed(seed), []
    for k, n in enumerate(parts):
        if reseed:
            gen = torch.Generator().manual_seed(seed + (k if reseed == "rank" else 0))
        chunks.append(
            torch.stack(
                [
                    torch.empty(n, features, dtype=torch.float64).bernoulli_(1 - p, generator=gen)
                    for _ in range(2)
                ]
            )
        )
    return torch.cat(chunks, dim=1)


@PROPERTY
@given(
    size=st.integers(1, 16),
    steps=st.integers(1, 16),
    p=st.floats(0.0, 0.9),
    seed=seeds,
    features=st.integers(1, 6),
)
def test_dropout_masks_match_explicit_generators(size, steps, p, seed, features):
    steps = min(steps, size)
    before = torch.get_rng_state()
    result = trajectory.dropout_split(size, steps, p, seed, features)
    assert torch.equal(before, torch.get_rng_state())  # the global stream is left alone
    parts = [len(c) for c in torch.arange(size).tensor_split(steps)]
    reference = explicit_masks([size], features, p, seed, None)
    assert torch.equal(torch.tensor(result.mask_one_batch), reference)
    expected = {
        "continued_stream": explicit_masks(parts, features, p, seed, None),
        "reseeded_each_microstep": explicit_masks(parts, features, p, seed, "every"),
        "seed_per_rank": explicit_masks(parts, features, p, seed, "rank"),
    }
    rows = {r["variant"]: r for r in result.rows}
    for name, mask in expected.items():
        assert torch.equal(torch.tensor(result.masks[name]), mask), name
        assert rows[name]["mask_mismatch"] == pytest.approx(
            (mask != reference).double().mean().item()
        )
    per_sample = torch.stack(
        [
            torch.empty(2, features, dtype=torch.float64).bernoulli_(
                1 - p, generator=torch.Generator().manual_seed(seed + i)
            )
            for i in range(size)
        ],
        dim=1,
    )
    assert torch.equal(torch.tensor(result.masks["per_sample_seed"]), per_sample)
    assert (
        rows["per_sample_seed"]["mask_mismatch"] == 0
        and rows["per_sample_seed"]["max_grad_diff"] <= 1e-12
    )
    if steps == 1:
        assert all(r["mask_mismatch"] == 0 for r in result.rows)


def test_dropout_defaults_and_bad_input():
    result = trajectory.dropout_split()
    rows = {r["variant"]: r for r in result.rows}
    assert rows["reseeded_each_microstep"]["mask_mismatch"] > 0 and result.difference > 0
    with pytest.raises(InvalidInput, match="^p=1"):
        trajectory.dropout_split(p=1.0)
    with pytest.raises(InvalidInput, match="^accum_steps=9"):
        trajectory.dropout_split(8, 9)
