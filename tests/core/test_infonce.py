"""core.infonce against torch autograd in float64.

The reference never reuses the module's formulas: it builds the logits, lets
`cross_entropy` take the loss, and lets autograd produce every gradient. Each parallel
scheme is simulated as the ranks would run it: one replica of (wq, wd) per rank, rank r
back-propagating the loss it actually computes, with `.detach()` wherever a real
implementation detaches, and DDP's mean taken over the replicas' gradients.
"""

import math
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pclab.core import infonce
from pclab.core.validation import InvalidInput, finite_or_none
from pclab.experiments.negatives import report as negatives_report

torch.set_default_dtype(torch.float64)
TOL = 1e-12
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def close(got, want, tol=TOL):
    """Elementwise |got - want| <= tol * (1 + |want|), through nested tuples."""
    if isinstance(want, (tuple, list)):
        return len(got) == len(want) and all(
            close(g, w, tol) for g, w in zip(got, want, strict=True)
        )
    return math.isfinite(got) and abs(got - want) <= tol * (1 + abs(want))


def as_tensor(reps):
    x = torch.tensor(reps, dtype=torch.float64)
    return x[:, None] if x.dim() == 1 else x


def shaped(tensor, vector):
    rows = tensor.tolist()
    return tuple(tuple(r) for r in rows) if vector else tuple(r[0] for r in rows)


def ce(logits, target):
    return torch.nn.functional.cross_entropy(logits, target)


def torch_contrastive(q, d, tau):
    """Loss, probs, full and kept document gradients and the contribution table, by autograd."""
    vector = not isinstance(q[0], (int, float))
    qt, dt = as_tensor(q), as_tensor(d).requires_grad_(True)
    n = len(qt)
    logits = qt @ dt.T / tau
    loss = ce(logits, torch.arange(n))
    (full,) = torch.autograd.grad(loss, dt)
    # Common implementation: rank r scores q_r against the gathered documents, the remote
    # ones detached, and back-propagates its loss; the global 1/n is applied on top.
    kept = torch.zeros_like(dt)
    for r in range(n):
        docs = torch.stack([dt[j] if j == r else dt[j].detach() for j in range(n)])
        loss_r = ce((qt[r] @ docs.T / tau)[None], torch.tensor([r])) / n
        kept += torch.autograd.grad(loss_r, dt)[0]
    rows = []
    for i in range(n):
        loss_i = ce((qt[i] @ dt.T / tau)[None], torch.tensor([i])) / n
        rows.append(shaped(torch.autograd.grad(loss_i, dt)[0], vector))
    return {
        "loss": loss.item(),
        "probs": tuple(tuple(r) for r in torch.softmax(logits, dim=1).tolist()),
        "full": shaped(full, vector),
        "kept": shaped(kept, vector),
        "contributions": tuple(rows),
    }


def torch_encoder(a, b, wq, wd, tau, scheme):
    """Per-rank pre-DDP gradients on each rank's own parameter replica, then DDP's mean."""
    at, bt = as_tensor(a), as_tensor(b)
    n = len(at)
    wqs = [torch.tensor(float(wq), requires_grad=True) for _ in range(n)]
    wds = [torch.tensor(float(wd), requires_grad=True) for _ in range(n)]
    q = [wqs[r] * at[r] for r in range(n)]  # each rank encodes its own pair
    d = [wds[r] * bt[r] for r in range(n)]
    losses = []
    for r in range(n):
        if scheme == "gather":  # differentiable gather: gradients flow back to each owner
            docs = torch.stack(d)
            losses.append(ce((q[r] @ docs.T / tau)[None], torch.tensor([r])))
        elif scheme == "detach":
            docs = torch.stack([d[j] if j == r else d[j].detach() for j in range(n)])
            losses.append(ce((q[r] @ docs.T / tau)[None], torch.tensor([r])))
        elif scheme == "local":
            losses.append(ce((q[r] @ d[r][None].T / tau)[None], torch.tensor([0])))
        else:  # gathered without grad, own features re-inserted, the whole mean loss
            qs = torch.stack([q[j] if j == r else q[j].detach() for j in range(n)])
            docs = torch.stack([d[j] if j == r else d[j].detach() for j in range(n)])
            losses.append(ce(qs @ docs.T / tau, torch.arange(n)))
    # One backward over every rank's loss: the gather's backward is what couples them.
    grads = torch.autograd.grad(sum(losses), wqs + wds, allow_unused=True)
    grads = [0.0 if g is None else g.item() for g in grads]
    gwq, gwd = grads[:n], grads[n:]
    wq_ref = torch.tensor(float(wq), requires_grad=True)
    wd_ref = torch.tensor(float(wd), requires_grad=True)
    reference = ce((wq_ref * at) @ (wd_ref * bt).T / tau, torch.arange(n))
    ref_wq, ref_wd = (g.item() for g in torch.autograd.grad(reference, (wq_ref, wd_ref)))
    return {
        "local_loss": tuple(x.item() for x in losses),
        "gwq": tuple(gwq),
        "gwd": tuple(gwd),
        "grad_wq": sum(gwq) / n,
        "grad_wd": sum(gwd) / n,
        "reference": (ref_wq, ref_wd),
    }


# --- the seed's published figures -----------------------------------------------------------


def test_seed_figures():
    result = infonce.contrastive([1, 2], [1, -1], 1.0)
    assert result.loss == pytest.approx(2.072539, abs=5e-7)
    assert result.grad_d_full[0] == pytest.approx(0.922412, abs=5e-7)
    assert result.grad_d_local[0] == pytest.approx(-0.059601, abs=5e-7)
    # The largest gap is d0's: exactly the remote query 1's dropped contribution, p_10 q_1 / 2.
    assert result.max_grad_diff == pytest.approx(0.982014, abs=5e-7)
    assert result.max_grad_diff == pytest.approx(result.contributions[1][0], abs=1e-15)


def test_seed_encoder_gather_equals_objective_and_full_loss_needs_world_size():
    args = (infonce.SEED[k] for k in ("a", "b", "wq", "wd", "tau"))
    a, b, wq, wd, tau = args
    gather = infonce.encoder_grads(a, b, wq, wd, tau, "gather")
    full_each = infonce.encoder_grads(a, b, wq, wd, tau, "full_loss_each_rank")
    local = infonce.encoder_grads(a, b, wq, wd, tau, "local")
    assert gather.local_loss == pytest.approx((0.126928, 4.018150), abs=5e-7)
    assert (gather.correction_wq, gather.correction_wd) == pytest.approx((1.0, 1.0), abs=1e-12)
    assert (full_each.correction_wq, full_each.correction_wd) == pytest.approx(
        (2.0, 2.0), abs=1e-12
    )
    assert local.local_loss == (0.0, 0.0) and (local.grad_wq, local.grad_wd) == (0.0, 0.0)
    assert local.correction_wq is None and local.correction_wd is None


# --- against autograd ----------------------------------------------------------------------


@pytest.mark.parametrize("scheme", infonce.SCHEMES)
def test_encoder_seed_matches_autograd(scheme):
    s = infonce.SEED
    got = infonce.encoder_grads(s["a"], s["b"], s["wq"], s["wd"], s["tau"], scheme)
    want = torch_encoder(s["a"], s["b"], s["wq"], s["wd"], s["tau"], scheme)
    assert close(got.local_loss, want["local_loss"])
    assert close(got.grad_wq_local, want["gwq"]) and close(got.grad_wd_local, want["gwd"])
    assert close((got.grad_wq, got.grad_wd), (want["grad_wq"], want["grad_wd"]))
    assert close((got.reference_wq, got.reference_wd), want["reference"])


values = st.floats(-3, 3, allow_nan=False)
taus = st.floats(0.05, 10)


@st.composite
def pairs(draw, min_n=1):
    """n pairs of scalars or of m-vectors, with n and m random."""
    n = draw(st.integers(min_n, 5))
    m = draw(st.sampled_from([None, 1, 2, 4]))
    rep = values if m is None else st.lists(values, min_size=m, max_size=m).map(tuple)
    return (
        draw(st.lists(rep, min_size=n, max_size=n)),
        draw(st.lists(rep, min_size=n, max_size=n)),
    )


@PROPERTY
@given(pairs(), taus)
def test_contrastive_matches_autograd(qd, tau):
    q, d = qd
    got = infonce.contrastive(q, d, tau)
    want = torch_contrastive(q, d, tau)
    assert close(got.loss, want["loss"])
    assert close(got.probs, want["probs"])
    assert close(got.grad_d_full, want["full"])
    assert close(got.grad_d_local, want["kept"])
    assert close(got.contributions, want["contributions"])


@PROPERTY
@given(pairs(), values, values, taus, st.sampled_from(infonce.SCHEMES))
def test_encoder_grads_match_autograd(ab, wq, wd, tau, scheme):
    a, b = ab
    got = infonce.encoder_grads(a, b, wq, wd, tau, scheme)
    want = torch_encoder(a, b, wq, wd, tau, scheme)
    assert close(got.local_loss, want["local_loss"])
    assert close(got.grad_wq_local, want["gwq"]) and close(got.grad_wd_local, want["gwd"])
    assert close((got.grad_wq, got.grad_wd), (want["grad_wq"], want["grad_wd"]))
    assert close((got.reference_wq, got.reference_wd), want["reference"])


@PROPERTY
@given(pairs(min_n=2), values, values, taus)
def test_gather_is_the_objective_and_full_loss_each_rank_is_one_nth(ab, wq, wd, tau):
    a, b = ab
    gather = infonce.encoder_grads(a, b, wq, wd, tau, "gather")
    full_each = infonce.encoder_grads(a, b, wq, wd, tau, "full_loss_each_rank")
    n = len(a)
    assert close((gather.grad_wq, gather.grad_wd), (gather.reference_wq, gather.reference_wd))
    assert close(
        (n * full_each.grad_wq, n * full_each.grad_wd), (gather.reference_wq, gather.reference_wd)
    )


@PROPERTY
@given(pairs(), taus)
def test_probabilities_and_document_gradients_balance(qd, tau):
    # Rows of p sum to 1, so shifting every d by the same vector leaves L unchanged: the
    # full document gradients sum to zero. The kept ones need not.
    q, d = qd
    result = infonce.contrastive(q, d, tau)
    assert all(abs(sum(row) - 1) <= 1e-12 for row in result.probs)
    full = [g if isinstance(g, tuple) else (g,) for g in result.grad_d_full]
    assert all(abs(sum(col)) <= 1e-12 * (1 + sum(map(abs, col))) for col in zip(*full, strict=True))


def test_numpy_arrays_are_accepted_like_lists():
    import numpy as np

    as_lists = infonce.contrastive([[1.0, 0.5], [2.0, -1.0]], [[1.0, 0.0], [-1.0, 2.0]], 0.7)
    as_arrays = infonce.contrastive(
        np.array([[1.0, 0.5], [2.0, -1.0]]), np.array([[1.0, 0.0], [-1.0, 2.0]]), 0.7
    )
    assert as_arrays == as_lists
    assert isinstance(as_arrays.grad_d_full[0], tuple) and len(as_arrays.grad_d_full[0]) == 2


def test_single_pair_is_legal_and_zero():
    result = infonce.contrastive([3.0], [-2.0], 0.5)
    assert result.loss == 0.0 and result.probs == ((1.0,),)
    assert result.grad_d_full == (0.0,) and result.grad_d_local == (0.0,)


# --- stability ------------------------------------------------------------------------------


@PROPERTY
@given(st.lists(st.floats(-100, 100), min_size=2, max_size=4), st.floats(0.01, 1.0))
def test_large_logits_stay_finite_and_match_autograd(q, tau):
    # |q d / tau| reaches 1e4 / 0.01 ... keep it within 1e4 as the issue requires and beyond.
    d = [x * (-1) ** i for i, x in enumerate(q)]
    got = infonce.contrastive(q, d, tau)
    want = torch_contrastive(q, d, tau)
    assert math.isfinite(got.loss) and got.loss >= 0
    assert close(got.loss, want["loss"])
    assert close(got.grad_d_full, want["full"])


def test_logits_of_1e4_do_not_overflow():
    # s = [[-1e4, 1e4], [-1e4, 1e4]]: exp(1e4) overflows float64, log-sum-exp does not.
    result = infonce.contrastive([100.0, 100.0], [-100.0, 100.0], 1.0)
    assert result.loss == pytest.approx(1e4, rel=1e-12)  # (2e4 + 0) / 2
    assert result.probs == ((0.0, 1.0), (0.0, 1.0))
    assert result.grad_d_full == pytest.approx((-50.0, 50.0), rel=1e-12)  # (p - 1) q / (n tau)


# --- invalid input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "q, d, tau, field, rule",
    [
        ([1, 2], [1, -1], 0.0, "tau", "positive"),
        ([1, 2], [1, -1], -1.0, "tau", "positive"),
        ([1, 2], [1, -1], math.nan, "tau", "positive"),
        ([1, 2], [1, -1], math.inf, "tau", "positive"),
        ([], [], 1.0, "q", "non_empty"),
        ("12", [1, 2], 1.0, "q", "non_empty"),
        ({1.0, 2.0}, [1, 2], 1.0, "q", "non_empty"),
        ([1, 2], {0: 1.0, 1: -1.0}, 1.0, "d", "non_empty"),
        ([math.nan, 2], [1, -1], 1.0, "q[0]", "finite"),
        ([1, 2], [1, math.inf], 1.0, "d[1]", "finite"),
        ([1, 2], [1, -1, 0], 1.0, "d", "same_shape"),
        ([1, 2], [[1], [-1]], 1.0, "d", "same_shape"),
        ([[1, 2], [3, 4]], [[1, 2], [3]], 1.0, "d", "rectangular"),
        ([[1, 2], 3], [1, 2], 1.0, "q", "rectangular"),
        ([[], []], [[], []], 1.0, "q", "rectangular"),
        ([1e200, 1], [1e200, 1], 1.0, "q·d/tau", "finite"),
        ([1.0, 1.0], [1.0, -1.0], 1e-320, "q·d/tau", "finite"),
        ([1e300, 1e300], [1e-300, 2e-300], 1e-10, "gradient", "finite"),
    ],
)
def test_contrastive_rejects(q, d, tau, field, rule):
    with pytest.raises(InvalidInput) as info:
        infonce.contrastive(q, d, tau)
    assert (info.value.field, info.value.rule) == (field, rule)
    assert field in str(info.value)


@pytest.mark.parametrize("q", [[1, "2"], [1, None], [True, 2.0], 3.0])
def test_non_numbers_raise_type_error_or_value_error(q):
    with pytest.raises((TypeError, ValueError)):
        infonce.contrastive(q, [1, -1], 1.0)


def test_non_number_entry_is_type_error():
    with pytest.raises(TypeError):
        infonce.contrastive([1, "2"], [1, -1], 1.0)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"scheme": "allreduce"}, "scheme"),
        ({"wq": math.nan}, "wq"),
        ({"wd": math.inf}, "wd"),
        ({"tau": 0}, "tau"),
        ({"b": [1, 2, 3]}, "b"),
        ({"a": []}, "a"),
    ],
)
def test_encoder_grads_rejects(kwargs, field):
    args = {
        "a": [1, 2],
        "b": [1, -1],
        "wq": 1.0,
        "wd": 1.0,
        "tau": 1.0,
        "scheme": "gather",
        **kwargs,
    }
    with pytest.raises(InvalidInput) as info:
        infonce.encoder_grads(**args)
    assert info.value.field == field


def test_tau_sweep_rows_and_rejects():
    rows = infonce.tau_sweep([1, 2], [1, -1], (0.5, 1.0, 2.0))
    assert [r["tau"] for r in rows] == [0.5, 1.0, 2.0]
    assert rows[1]["grad_full"] == pytest.approx(0.922412, abs=5e-7)
    assert rows[1]["grad_local"] == pytest.approx(-0.059601, abs=5e-7)
    for bad, field in [((), "taus"), ((1.0, 0.0), "tau")]:
        with pytest.raises(InvalidInput) as info:
            infonce.tau_sweep([1, 2], [1, -1], bad)
        assert info.value.field == field
    with pytest.raises(InvalidInput):
        infonce.tau_sweep([1, 2], [1, -1], doc=2)


junk = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**400), 10**400),
    st.none(),
    st.text(max_size=3),
    st.booleans(),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=3),
)
junk_reps = st.one_of(junk, st.lists(junk, max_size=4))


@PROPERTY
@given(junk_reps, junk_reps, junk)
def test_fuzz_contrastive_only_value_or_type_errors(q, d, tau):
    try:
        result = infonce.contrastive(q, d, tau)
    except (ValueError, TypeError):
        return
    assert math.isfinite(result.loss) and result.loss >= 0
    assert all(math.isfinite(p) for row in result.probs for p in row)


@PROPERTY
@given(junk_reps, junk_reps, junk, junk, junk, st.one_of(st.sampled_from(infonce.SCHEMES), junk))
def test_fuzz_encoder_grads_only_value_or_type_errors(a, b, wq, wd, tau, scheme):
    try:
        result = infonce.encoder_grads(a, b, wq, wd, tau, scheme)
    except (ValueError, TypeError):
        return
    assert all(math.isfinite(x) for x in (result.grad_wq, result.grad_wd, *result.local_loss))


def test_core_does_not_import_torch():
    code = "import sys, pclab.core.infonce; assert 'torch' not in sys.modules"
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=str(__import__("pathlib").Path(__file__).parents[2]),
    )


# --- check_run: a run's report beside the prediction ------------------------------------------


def autograd_report(a, b, wq, wd, tau, lr=0.1):
    """A report shaped like the runner's, every number from the torch simulation above."""
    schemes = {}
    for scheme in infonce.SCHEMES:
        sim = torch_encoder(a, b, wq, wd, tau, scheme)
        schemes[scheme] = {
            "grad_wq": sim["grad_wq"],
            "grad_wd": sim["grad_wd"],
            "params_after_sgd": {"wq": wq - lr * sim["grad_wq"], "wd": wd - lr * sim["grad_wd"]},
            "ranks": [
                {"rank": r, "local_loss": loss, "grad_wq_local": gq, "grad_wd_local": gd}
                for r, (loss, gq, gd) in enumerate(
                    zip(sim["local_loss"], sim["gwq"], sim["gwd"], strict=True)
                )
            ],
        }
    return {
        "a": list(a),
        "b": list(b),
        "wq": wq,
        "wd": wd,
        "tau": tau,
        "lr": lr,
        "schemes": schemes,
    }


@pytest.mark.parametrize("world_size", [2, 3])
def test_check_run_agrees_with_an_autograd_report(world_size):
    a, b = [1.0, 2.0, 3.0][:world_size], [1.0, -1.0, 0.5][:world_size]
    rows = negatives_report.check_run(autograd_report(a, b, 1.0, 1.0, 0.7))
    assert [r["scheme"] for r in rows] == list(infonce.SCHEMES)
    assert all(r["agree"] and r["max_abs_diff"] <= 1e-12 for r in rows)
    assert all(r["compared"] == 4 + 3 * world_size for r in rows)


@pytest.mark.parametrize(
    "path",
    [
        ("gather", "grad_wd"),
        ("detach", "params_after_sgd", "wq"),
        ("full_loss_each_rank", "ranks", 1, "local_loss"),
    ],
)
def test_check_run_flags_a_wrong_number(path):
    report = autograd_report([1.0, 2.0], [1.0, -1.0], 1.0, 1.0, 1.0)
    node = report["schemes"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] += 1e-9
    rows = {r["scheme"]: r for r in negatives_report.check_run(report)}
    assert not rows[path[0]]["agree"] and rows[path[0]]["max_abs_diff"] == pytest.approx(
        1e-9, rel=1e-3
    )
    assert all(r["agree"] for s, r in rows.items() if s != path[0])


def test_check_run_missing_or_non_finite_never_agrees():
    report = autograd_report([1.0, 2.0], [1.0, -1.0], 1.0, 1.0, 1.0)
    del report["schemes"]["local"]
    report["schemes"]["detach"]["grad_wq"] = math.nan
    report["schemes"]["gather"]["ranks"] = report["schemes"]["gather"]["ranks"][:1]
    rows = {r["scheme"]: r for r in negatives_report.check_run(report)}
    assert rows["local"]["measured_wq"] is None and not rows["local"]["agree"]
    assert rows["detach"]["measured_wq"] is None and rows["detach"]["max_abs_diff"] is None
    assert not rows["gather"]["agree"] and rows["full_loss_each_rank"]["agree"]


MALFORMED = [
    (None, "report"),
    ({"schemes": []}, "report"),
    ({"schemes": {}, "wq": 1.0, "wd": math.inf, "lr": 0.1}, "wd"),
    ({"schemes": {}, "wq": 1.0, "wd": 1.0, "lr": 0.1, "b": [1.0], "tau": 1.0}, "a"),
]


@pytest.mark.parametrize("report, field", MALFORMED)
def test_check_run_rejects_a_malformed_report(report, field):
    with pytest.raises(InvalidInput) as info:
        negatives_report.check_run(report)
    assert info.value.field == field


@pytest.mark.parametrize(
    "value, expected",
    [
        (1.5, 1.5),
        (-2, -2.0),
        (0, 0.0),
        (math.inf, None),
        (math.nan, None),
        (True, None),
        ("1", None),
        (None, None),
        (10**400, None),
    ],
)
def test_finite_or_none_is_undefined_for_anything_but_a_finite_number(value, expected):
    assert finite_or_none(value) == expected


def test_the_contribution_table_is_built_only_when_read():
    """512 pairs of 64-vectors: 16.8 million table entries that most callers never read."""
    import numpy as np

    rng = np.random.default_rng(0)
    q, d = rng.normal(size=(512, 64)), rng.normal(size=(512, 64))
    result = infonce.contrastive(q, d, 1.0)
    assert "contributions" not in vars(result)  # not built yet
    small = infonce.contrastive(q[:6], d[:6], 0.7)
    table = np.array(small.contributions)  # (query, document, dim)
    assert np.allclose(table.sum(axis=0), np.array(small.grad_d_full), rtol=0, atol=1e-15)
    assert np.allclose(np.diagonal(table).T, np.array(small.grad_d_local), rtol=0, atol=0)
