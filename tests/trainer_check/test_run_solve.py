"""run_solve on steps built here from weights chosen here: a loop that zeroes its gradients
once per epoch, on a 5-parameter linear model, two ranks, two windows of two microsteps.

Each step's change is computed in this file (torch autograd in float64 at the parameters the
loop held, times the chosen weights), so the solve has one right answer. Its second step
carries 8 candidate microbatches, more than the model's 5 parameters: one replay cannot tell
their weights apart; replays from other starting points (the same weights) can; replays whose
weights differ between starting points must not be given one set of weights.

    python -m pytest -q tests/trainer_check/test_run_solve.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pclab.experiments.trainer_check import run_loop, run_reference, run_report, run_solve
from pclab.experiments.trainer_check.run_observe import Step
from pclab.experiments.trainer_check.trainer_file import load

LINEAR = Path(__file__).parent / "blind_run" / "zero_grad_per_epoch_linear.py"
SIZES = [[3, 5, 2, 6], [4, 1, 7, 3]]  # [rank][microbatch] examples, one epoch
LR = 0.1


@pytest.fixture(scope="module")
def setting():
    trainer = load(LINEAR)
    generator = torch.Generator().manual_seed(11)
    epochs = [[[trainer.module.make_microbatch(n, generator) for n in row] for row in SIZES]]
    terms = [[row] for row in SIZES]
    return trainer, epochs, terms, run_reference.windows(epochs, 2, terms)


def _gradient(trainer, at: dict[str, torch.Tensor], batch) -> dict[str, torch.Tensor]:
    model = trainer.module.build_model()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(at[name])
    trainer.module.token_losses(model, batch).sum().backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def _replay(trainer, epochs, start: int, leak: float) -> list[Step]:
    """The loop's two SGD steps from `start` (0: the file's model), each window's own
    microbatches weighted 1 / N of the window, window 0's kept in the second step x `leak`."""
    model = trainer.module.build_model()
    if start:
        run_loop.moved(model, start)
    theta = {n: p.detach().clone() for n, p in model.named_parameters()}
    counts = [sum(r[i] for r in SIZES for i in w) for w in ((0, 1), (2, 3))]
    carried = {n: torch.zeros_like(t) for n, t in theta.items()}
    steps = []
    for w, own in enumerate(((0, 1), (2, 3))):
        total = {n: c.clone() for n, c in carried.items()}
        for row in epochs[0]:
            for i in own:
                g = _gradient(trainer, theta, row[i])
                for n in total:
                    total[n] += g[n] / counts[w]
                    if w == 0:
                        carried[n] += leak * g[n] / counts[w]
        after = {n: theta[n] - LR * total[n] for n in theta}
        steps.append(
            Step(
                forwards=own[-1] + 1,
                lrs=(LR,),
                before={f"parameter {n}": t.clone() for n, t in theta.items()},
                after={f"parameter {n}": t.clone() for n, t in after.items()},
            )
        )
        theta = after
    return steps


def _solve(setting, runs):
    trainer, epochs, terms, windows = setting
    return run_solve.solve(trainer, epochs, terms, windows, runs, "cpu", 1e-9)


def test_one_replay_cannot_tell_eight_candidates_apart_on_five_parameters(setting):
    trainer, epochs, _, _ = setting
    first, second = _solve(setting, [_replay(trainer, epochs, 0, 1.0)])
    assert first["identifiable"] and first["leak"] == 0.0  # 4 candidates
    assert second["identifiable"] is False and second["leak"] is None
    assert run_solve.underdetermined([first, second])


def test_replays_from_other_starting_points_give_the_weights_and_the_leak(setting):
    trainer, epochs, _, _ = setting
    runs = [_replay(trainer, epochs, s, 1.0) for s in range(run_solve.STARTS)]
    assert run_solve.same_placement(runs, setting[3])
    first, second = _solve(setting, runs)
    assert second["identifiable"] and second["residual"] < 1e-9
    for row in (*first["weights"], *second["weights"]):  # 1 / N: the global token mean
        assert row == pytest.approx([1.0, 1.0], rel=1e-9)
    n0, n1 = 3 + 5 + 4 + 1, 2 + 6 + 7 + 3  # window 0's gradient at 1 / N0, in update 1
    assert second["leak"] == pytest.approx(n1 / n0, rel=1e-9)


def test_weights_that_change_with_the_starting_point_are_not_solved_together(setting):
    trainer, epochs, _, _ = setting
    runs = [_replay(trainer, epochs, s, 1.0 + s) for s in range(run_solve.STARTS)]
    _, second = _solve(setting, runs)
    assert second["identifiable"] is False and second["leak"] is None
    assert second["residual"] > 1e-6


def test_a_moved_start_is_the_same_on_every_call_and_differs_from_the_file_s_own():
    trainer = load(LINEAR)
    own = trainer.module.build_model()
    a, b = trainer.module.build_model(), trainer.module.build_model()
    run_loop.moved(a, 2)
    run_loop.moved(b, 2)
    for (name, p), q, r in zip(own.named_parameters(), a.parameters(), b.parameters()):
        assert torch.equal(q, r), name
        assert not torch.equal(p, q), name


@pytest.mark.parametrize(
    ("residual", "leak", "scheme"), [(1e-15, 4.0, "global_token"), (0.77, None, "other")]
)
def test_a_leak_is_claimed_only_from_weights_that_explain_the_step(residual, leak, scheme):
    """A solve that leaves a residual (a step no weighted sum of the microbatches' gradients
    makes: measured, a ZeRO-2 Trainer that stepped AdamW when handed SGD, residual 0.77) has
    weights on earlier microbatches that mean nothing: no gradient_leak from them."""
    entry = {"window": 0, "weights": [[1.0, 1.0]], "counts": [[3, 5]], "leak": 4.0}
    updates = [{"skipped": False}]
    run_report._attach_solve(updates, [entry | {"residual": residual, "identifiable": True}], 1e-9)
    assert (updates[0]["leak"], updates[0]["scheme"]) == (leak, scheme)
