"""Watching the trainer's own loop run, without asking the file for anything: every optimizer
step through torch's global optimizer step hooks (framework-owned optimizers too), and the
model's forward calls, each recognised by its input (a fingerprint of its first tensor), so
each step is placed after the microbatch the loop ran last, wherever it is in the run: a loop
that skips a window's forwards (N = 0) or copies its microbatches is still placed right.

    with Observer(trainer, model, positions) as seen:
        trainer.call("train_loop", model, optimizer, epochs, accum_steps)
    seen.steps  # [Step(forwards, lrs, before, after), ...]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch

from pclab.experiments.trainer_check.states import State, same_state
from pclab.experiments.trainer_check.trainer import Trainer, holds_none_of, snapshot


def fingerprint(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes | None:
    """The bytes of a forward call's first tensor argument (input_ids), or None."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not tensors:
        return None
    first = tensors[0].detach().cpu().contiguous()
    raw: bytes = first.flatten().view(torch.uint8).numpy().tobytes()
    return str((tuple(first.shape), first.dtype)).encode() + raw


@dataclass(frozen=True)
class Step:
    """One optimizer step the loop took."""

    forwards: int  # the run index (from 1) of the last microbatch the model ran before it
    lrs: tuple[float, ...]  # each param group's learning rate it stepped with
    before: State  # the parameters it started from ("parameter <name>", float64)
    after: State  # the parameters and that optimizer's state after it
    # False: a wrapper's inner optimizer stepped (ZeRO's, on flat partitions: its state is
    # keyed by none of the model's parameters), so `after` holds the parameters alone
    state_read: bool = True

    def change(self, names: list[str]) -> torch.Tensor:
        """Its parameters' change, flat, in the order of `names` (named_parameters')."""
        return torch.cat(
            [
                (self.after[f"parameter {n}"] - self.before[f"parameter {n}"]).flatten()
                for n in names
            ]
        )


def state_read(steps: list[Step]) -> bool:
    """Every step's optimizer state was read (none stepped a wrapper's optimizer)."""
    return all(step.state_read for step in steps)


@dataclass
class Observer:
    """Counts the model's forwards and records every optimizer step while it is entered."""

    trainer: Trainer
    model: torch.nn.Module
    positions: dict[bytes, int]  # a microbatch input's fingerprint -> its run index, from 1
    forwards: int = 0
    steps: list[Step] = field(default_factory=list)
    seen: list[int] = field(default_factory=list)  # every forward's run index, in order
    placed: list[bool] = field(default_factory=list)  # per forward: its input was handed out
    _handles: list[Any] = field(default_factory=list)
    _pending: list[tuple[int, tuple[float, ...], State]] = field(default_factory=list)
    _deferred: tuple[int, tuple[float, ...], State, torch.optim.Optimizer] | None = None

    def _named(self) -> State:
        named = self.trainer.parameters(self.model, stepped_by_user=True)
        return {f"parameter {n}": t.detach().double().clone() for n, t in named.items()}

    def _forward(self, _: object, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        self._settle()
        if not torch.is_grad_enabled():
            # an evaluation forward (a framework's validation, litgpt's sanity check on the
            # first rows): it leaves no gradient, so it is no microbatch of the run, and read
            # as one it placed a restart at the validation's input
            return
        given = fingerprint(args, kwargs)
        # an input the check did not hand out (a copy, a framework's own batch): in order
        at = self.positions.get(given, self.forwards + 1) if given else self.forwards + 1
        self._at(at, given is not None and given in self.positions)

    def _at(self, at: int, placed: bool) -> None:
        """The loop ran microbatch `at` (`placed`: recognised by its input, not counted)."""
        self.forwards = at
        self.seen.append(at)
        self.placed.append(placed)
        self._arrived()

    def _arrived(self) -> None:
        """The loop has just run microbatch `self.forwards` (a resume launch's observer kills
        the rank there: resume_worker.killing_observer)."""

    def _pre(self, optimizer: torch.optim.Optimizer, *_: object) -> None:
        lrs = tuple(float(g.get("lr", float("nan"))) for g in optimizer.param_groups)
        self._pending.append((self.forwards, lrs, self._named()))

    def _post(self, optimizer: torch.optim.Optimizer, *_: object) -> None:
        if not self._pending:  # a step whose pre-hook another observer saw
            return
        lrs, before = self._pending.pop()[1:]
        # placed by the last forward before the step ENDED: a closure (Lightning's automatic
        # optimisation, LBFGS) runs the window's last forward inside optimizer.step()
        forwards = self.forwards
        if holds_none_of(optimizer, self.model):  # ZeRO's flat partitions
            self._defer((forwards, lrs, before, optimizer))
            return
        self._settle()
        last = self.steps[-1] if self.steps else None
        if last is not None and last.forwards == forwards and same_state(last.before, before):
            return  # a wrapper's step around the step just recorded (one update, not two)
        named = self.trainer.parameters(self.model, stepped_by_user=True)
        self._record(Step(forwards, lrs, before, snapshot(self.model, optimizer, named)))

    def _record(self, step: Step) -> None:
        """Every step is recorded here, once complete (a subclass may save it as it goes)."""
        self.steps.append(step)

    def _defer(self, step: tuple[int, tuple[float, ...], State, torch.optim.Optimizer]) -> None:
        """A foreign optimizer's step: the model's parameters change only once its wrapper
        has copied them back, so the step is recorded at the next forward (or the end).
        Its next steps with no forward between are the same update's other groups."""
        if self._deferred is not None and self._deferred[0] == step[0]:
            return
        self._settle()
        self._deferred = step

    def _settle(self) -> None:
        """Record the deferred step, the model's parameters as they are now its after."""
        if self._deferred is None:
            return
        forwards, lrs, before, optimizer = self._deferred
        self._deferred = None
        named = self.trainer.parameters(self.model, stepped_by_user=True)
        after = snapshot(self.model, optimizer, named, with_optimizer=False)
        self._record(Step(forwards, lrs, before, after, state_read=False))

    def __enter__(self) -> Observer:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._handles = [
            self.model.register_forward_hook(self._forward, with_kwargs=True),
            register_optimizer_step_pre_hook(self._pre),
            register_optimizer_step_post_hook(self._post),
        ]
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._settle()  # the loop's last step, if deferred
        for handle in self._handles:
            handle.remove()  # always: a scenario that raised must not watch the next one
        self._handles = []
