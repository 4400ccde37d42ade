"""run_observe.Observer on loops written here, one process, no launch: what it records of each
optimizer step, above all of an optimizer that holds none of the model's parameters (a
wrapper's inner one on flat copies, as DeepSpeed ZeRO steps it: one parameter group at a
time, each copied back after its step). Each loop's true update is computed in this file.

    python -m pytest -q tests/trainer_check/test_run_observe.py
"""

from __future__ import annotations

from pathlib import Path

import torch

from pclab.experiments.trainer_check.run_observe import Observer
from pclab.experiments.trainer_check.trainer import StepWatch
from pclab.experiments.trainer_check.trainer_file import load

TRAINER = load(Path(__file__).parent / "blind_run" / "zero_grad_per_epoch.py")
LR = 0.1


def _model() -> torch.nn.Module:
    return TRAINER.module.build_model()


def _batch(seed: int) -> dict:
    return TRAINER.module.make_microbatch(4, torch.Generator().manual_seed(seed))


def _loss(model, batch) -> torch.Tensor:
    return TRAINER.module.token_losses(model, batch).sum()


def _by_hand(model, batches) -> dict[str, torch.Tensor]:
    """The true update: one SGD step on the summed gradient of `batches`."""
    model.zero_grad()
    for b in batches:
        _loss(model, b).backward()
    return {n: (p - LR * p.grad).detach() for n, p in model.named_parameters()}


class ZeroLike:
    """An inner SGD per parameter group, on flat copies of the model's parameters; its step
    steps group after group, each copied back into the model when its step is done."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.groups = [list(m.parameters()) for m in model if list(m.parameters())]
        self.flat = [
            torch.cat([p.detach().flatten() for p in g]).requires_grad_() for g in self.groups
        ]
        self.inner = torch.optim.SGD([{"params": [f]} for f in self.flat], lr=LR)

    def step(self) -> None:
        everything = self.inner.param_groups
        for i, (group, flat) in enumerate(zip(self.groups, self.flat)):
            flat.grad = torch.cat([p.grad.flatten() for p in group])
            self.inner.param_groups = [everything[i]]  # one group at a time, as ZeRO does
            self.inner.step()
            with torch.no_grad():  # copied back, group by group
                at = 0
                for p in group:
                    p.copy_(flat[at : at + p.numel()].view_as(p))
                    at += p.numel()
        self.inner.param_groups = everything


def _watched(model, loop) -> Observer:
    with Observer(TRAINER, model, {}) as seen:
        loop()
    return seen


def test_a_plain_optimizer_s_step_is_recorded_as_it_ends():
    model = _model()
    batches = [_batch(1), _batch(2)]
    want = _by_hand(_model(), batches)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    def loop():
        for b in batches:
            _loss(model, b).backward()
        optimizer.step()

    (step,) = _watched(model, loop).steps
    assert step.forwards == 2 and step.lrs == (LR,)
    for name, value in want.items():
        assert torch.allclose(step.after[f"parameter {name}"], value.double(), atol=1e-12), name


def test_a_wrapper_s_inner_steps_on_flat_copies_are_one_update_read_once_copied_back():
    model = _model()
    first, second = [_batch(1), _batch(2)], [_batch(3)]
    want = _by_hand(_model(), first)
    zero = ZeroLike(model)

    def loop():
        for window in (first, second):
            model.zero_grad()
            for b in window:
                _loss(model, b).backward()
            zero.step()

    steps = _watched(model, loop).steps
    assert [s.forwards for s in steps] == [2, 3]  # one step per update, not one per group
    for name, value in want.items():
        got = steps[0].after[f"parameter {name}"]
        assert torch.allclose(got, value.double(), atol=1e-12), name
    final = {f"parameter {n}": p.detach().double() for n, p in model.named_parameters()}
    assert all(torch.equal(steps[1].after[k], v) for k, v in final.items())  # the loop's end
    initial = {n: p.detach().double() for n, p in _model().named_parameters()}
    assert all(torch.equal(steps[0].before[f"parameter {n}"], v) for n, v in initial.items())


def test_the_one_update_step_watch_counts_steps_and_sees_flat_copies():
    """trainer.StepWatch (the one-update modes' counter): a plain optimizer's steps are read;
    the inner optimizer of a ZeroLike wrapper, handed to the watch as ZeRO is handed the
    user's, steps once per group on flat copies: counted, and its state marked unread."""
    model, batches = _model(), [_batch(1), _batch(2)]
    plain = torch.optim.SGD(model.parameters(), lr=LR)
    watch = StepWatch(plain, model)
    for b in batches:
        _loss(model, b).backward()
    plain.step()
    assert (watch.steps, watch.state_read) == (1, True)

    model = _model()
    zero = ZeroLike(model)
    watch = StepWatch(zero.inner, model)
    for b in batches:
        _loss(model, b).backward()
    zero.step()
    assert (watch.steps, watch.state_read) == (2, False)  # two groups, two inner steps
    assert StepWatch(object(), model).steps is None  # nothing to count with
