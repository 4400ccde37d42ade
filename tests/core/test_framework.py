"""core.framework and core.denominator against a simulated trainer in torch float64.

The simulation does what a trainer does: for every microbatch it back-propagates
coefficient * (local loss) into a parameter's .grad (accumulation), adds the regulariser
where the placement says, then applies the collective over replicas. The core result
must equal whatever this mechanical run produced, and the reference objective.
"""

import itertools

import pytest
import torch

from pclab.core import denominator, framework, ledger

torch.set_default_dtype(torch.float64)
LAMBDA = 0.05  # regulariser lambda * theta^2, so lambda R' = 2 * lambda * theta


def simulate(counts, collective, loss_input, divide_by_accum, reg_placement, seed=0):
    gen = torch.Generator().manual_seed(seed)
    theta = torch.tensor(0.4, requires_grad=True)
    data = [
        [(torch.randn(n, generator=gen), torch.randn(n, generator=gen)) for n in row]
        for row in counts
    ]
    replicas, steps = len(counts), len(counts[0])
    update = framework_update_for(
        counts, data, theta, collective, loss_input, divide_by_accum, reg_placement
    )
    replica_grads = []
    for r in range(replicas):
        theta.grad = None
        for k in range(steps):
            a, b = data[r][k]
            tokens = torch.nn.functional.softplus(a * theta + b)
            c = update.coefficients[r][k]
            loss = torch.zeros(())
            if c is not None:
                local = tokens.sum() if loss_input == "sum" else tokens.mean()
                loss = loss + c * local
            on_this_step = reg_placement == "every_microstep" or (
                k == 0 and (collective == "mean" or r == 0)
            )
            if on_this_step:
                loss = loss + LAMBDA * theta**2
            if loss.requires_grad:
                loss.backward()
        replica_grads.append(theta.grad.item() if theta.grad is not None else 0.0)
    reduced = sum(replica_grads) / (replicas if collective == "mean" else 1)
    every = torch.cat([torch.nn.functional.softplus(a * theta + b) for row in data for a, b in row])
    objective = every.mean() + LAMBDA * theta**2
    (reference,) = torch.autograd.grad(objective, theta)
    return update, reduced, reference.item()


def framework_update_for(
    counts, data, theta, collective, loss_input, divide_by_accum, reg_placement
):
    grad_sums = []
    for row in data:
        grad_row = []
        for a, b in row:
            (g,) = torch.autograd.grad(torch.nn.functional.softplus(a * theta + b).sum(), theta)
            grad_row.append(g.item())
        grad_sums.append(grad_row)
    return framework.framework_update(
        grad_sums,
        counts,
        collective=collective,
        loss_input=loss_input,
        divide_by_accum=divide_by_accum,
        reg_grad=2 * LAMBDA * theta.item(),
        reg_placement=reg_placement,
    )


COUNTS = [[3, 0, 5], [1, 7, 2]]


@pytest.mark.parametrize(
    ("collective", "loss_input", "divide_by_accum", "reg_placement"),
    list(
        itertools.product(
            ("mean", "sum"), ("sum", "local_mean"), (False, True), ("once", "every_microstep")
        )
    ),
)
def test_framework_update_matches_a_simulated_trainer(
    collective, loss_input, divide_by_accum, reg_placement
):
    update, reduced, reference = simulate(
        COUNTS, collective, loss_input, divide_by_accum, reg_placement
    )
    assert update.applied_gradient == pytest.approx(reduced, abs=1e-12)
    assert update.reference_gradient == pytest.approx(reference, abs=1e-12)
    is_correct = not divide_by_accum and reg_placement == "once"
    assert (abs(update.applied_gradient - reference) < 1e-12) is is_correct


def test_empty_microbatch_under_local_mean_is_skipped_not_zero():
    update = framework.framework_update(
        [[1.0, 0.0], [2.0, 3.0]], [[2, 0], [1, 1]], loss_input="local_mean"
    )
    assert update.coefficients[0][1] is None
    assert update.coefficients[0][0] == pytest.approx(2 * 2 / 4)


def test_zero_labels_is_a_skip():
    update = framework.framework_update([[0.0], [0.0]], [[0], [0]])
    assert update.skip and update.applied_gradient is None and update.num_valid_labels == 0


def test_regulariser_multiplier_closed_forms():
    assert framework.regulariser_multiplier(4, 3, "mean", "once") == 1
    assert framework.regulariser_multiplier(4, 3, "mean", "every_microstep") == 3
    assert framework.regulariser_multiplier(4, 3, "sum", "every_microstep") == 12
    with pytest.raises(ValueError, match="^placement="):
        framework.regulariser_multiplier(4, 3, "mean", "twice")
    with pytest.raises(ValueError, match="^replicas="):
        framework.regulariser_multiplier(0, 3, "mean", "once")


def test_weighted_loss_scale_reproduces_weighted_mean():
    """Class weights: the objective is sum w_t l_t / sum w_t, scaled by P / sum w under a mean."""
    gen = torch.Generator().manual_seed(5)
    theta = torch.tensor(0.2, requires_grad=True)
    weights = [[torch.rand(4, generator=gen), torch.rand(2, generator=gen)] for _ in range(3)]
    targets = [[torch.randn(4, generator=gen), torch.randn(2, generator=gen)] for _ in range(3)]
    weight_sums = [[w.sum().item() for w in row] for row in weights]
    scale = framework.weighted_loss_scale(weight_sums, "mean")
    replica_grads = []
    for wr, tr in zip(weights, targets):
        loss = scale * sum((w * 0.5 * (theta - t) ** 2).sum() for w, t in zip(wr, tr))
        (g,) = torch.autograd.grad(loss, theta)
        replica_grads.append(g.item())
    all_w = torch.cat([w for row in weights for w in row])
    all_t = torch.cat([t for row in targets for t in row])
    (ref,) = torch.autograd.grad((all_w * 0.5 * (theta - all_t) ** 2).sum() / all_w.sum(), theta)
    assert sum(replica_grads) / 3 == pytest.approx(ref.item(), abs=1e-12)
    assert framework.weighted_loss_scale([[0.0], [0.0]]) is None
    with pytest.raises(ValueError, match=r"^weight_sums\[0\]\[0\]="):
        framework.weighted_loss_scale([[-1.0]])


def test_count_valid_labels_and_errors():
    count = denominator.count_valid_labels(positions=96, padding=10, prompt=30, truncated=12)
    assert count.valid == 56
    with pytest.raises(ValueError, match=r"^padding \+ prompt="):
        denominator.count_valid_labels(positions=10, padding=6, prompt=6)
    with pytest.raises(ValueError, match="^positions="):
        denominator.count_valid_labels(positions=-1, padding=0, prompt=0)


def test_sequence_mean_is_its_own_objective():
    """Sequence mean: each labelled sequence's own mean, averaged; compare with torch."""
    gen = torch.Generator().manual_seed(9)
    counts = [4, 0, 1, 6]
    losses = [torch.rand(n, generator=gen) for n in counts]
    objective = denominator.sequence_mean_weights(counts)
    assert objective.labelled_sequences == 3
    weighted = sum(
        (w * loss).sum().item()
        for w, loss in zip(objective.per_label_weights, losses)
        if w is not None
    )
    reference = torch.stack([loss.mean() for loss in losses if len(loss)]).mean().item()
    assert weighted == pytest.approx(reference, abs=1e-12)
    assert objective.per_label_weights[1] is None and objective.sequence_shares[1] is None
    token_mean = torch.cat(losses).mean().item()
    assert abs(weighted - token_mean) > 1e-3  # two different objectives, both legitimate
    assert denominator.sequence_mean_weights([0, 0]) is None
    with pytest.raises(ValueError, match="^label_counts="):
        denominator.sequence_mean_weights([])


def test_local_loss_scale_seed_coefficient():
    """Section 03: P / N under a mean collective, 1 / N under a sum."""
    counts = [[2, 3], [0, 5]]
    assert ledger.local_loss_scale(counts, "mean") == pytest.approx(2 / 10)
    assert ledger.local_loss_scale(counts, "sum") == pytest.approx(1 / 10)
