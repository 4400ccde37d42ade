"""Watching a coupled loop over epochs (the coupled run mode): where the loop is, microbatch by
microbatch, though an embedding loss may never call the model itself and a framework may feed
it texts it tokenizes itself.

    ItemObserver    run_observe.Observer, placing by any module that runs on a microbatch's
                    tensor, or by the forward count (F a microbatch) where it recognises none
    observing       what makes one for a run (a resume launch's subclass too)
    own_inputs      what a text loop's model ran on, microbatch by microbatch, from one run:
                    the positions a resume launch places by
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

import torch

import pclab.experiments.trainer_check.run_loop as run_loop
from pclab.experiments.trainer_check.run_observe import Observer, fingerprint
from pclab.experiments.trainer_check.run_reference import Epochs
from pclab.experiments.trainer_check.trainer import Trainer


def item_fingerprint(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes | None:
    """run_observe.fingerprint, or that of the first tensor inside a dict argument (a
    SentenceTransformer's forward takes its tokenizer's features, a dict): what a forward ran
    on, recognised later by its bytes."""
    found = fingerprint(args, kwargs)
    if found is not None:
        return found
    inside = [v for a in (*args, *kwargs.values()) if isinstance(a, dict) for v in a.values()]
    return fingerprint(tuple(inside), {})


@dataclass
class ItemObserver(Observer):
    """run_observe.Observer for a loop of coupled microbatches: `microbatches` is the run's
    count a rank (its epochs' lengths summed).

    An embedding loss may never call the model itself (embed() runs its encoder on queries,
    then documents): every module of the model is watched too, and one that runs on a
    tensor of a microbatch places the loop there. A run whose inputs it recognised nowhere
    (texts the loop tokenizes) and whose model ran F times that count had F forwards a
    microbatch: each step is then placed at its forward count over F (and `learned` says
    what each microbatch's inputs became: the positions a resume launch places by)."""

    microbatches: int = 0
    keys: list[bytes | None] = field(default_factory=list)  # each counted forward's input

    def _forward(
        self, module: object, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        if not torch.is_grad_enabled():
            super()._forward(module, args, kwargs, out)  # not counted: an evaluation
            return
        key = item_fingerprint(args, kwargs)
        self.keys.append(key)
        if key is not None and key in self.positions:
            self._settle()
            self._at(self.positions[key], True)
            return
        super()._forward(module, args, kwargs, out)

    def __enter__(self) -> ItemObserver:
        super().__enter__()
        inner = [m for m in self.model.modules() if m is not self.model]
        self._handles += [m.register_forward_hook(self._inner, with_kwargs=True) for m in inner]
        return self

    def _inner(self, _: object, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """A module of the model ran: on a microbatch's tensor, the loop is at that one."""
        if not torch.is_grad_enabled():
            return
        at = self.positions.get(item_fingerprint(args, kwargs) or b"")
        if at is not None:
            self._settle()
            self._at(at, True)

    def _per(self) -> int:
        """F: forwards a microbatch of a run that recognised none (0: it recognised some, or
        its count is no multiple of the run's microbatches)."""
        total, ran = self.microbatches, len(self.keys)
        if any(self.placed) or not total or ran < total or ran % total:
            return 0
        return ran // total

    def learned(self) -> dict[bytes, int]:
        """What each microbatch's inputs became in this run (its forwards taken F at a time),
        by their fingerprint: empty unless `_per` is known."""
        per = self._per()
        found: dict[bytes, int] = {}
        for i, key in enumerate(self.keys if per else ()):
            if key is not None:
                found.setdefault(key, i // per + 1)
        return found

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        super().__exit__(kind, error, trace)
        per = self._per()
        if per > 1:
            self.steps = [replace(step, forwards=-(-step.forwards // per)) for step in self.steps]


def observing(
    epochs: Epochs,
    kind: type[ItemObserver] = ItemObserver,
    learned: dict[bytes, int] | None = None,
    made: list[ItemObserver] | None = None,
) -> run_loop.ObserverFactory:
    """What makes a coupled loop's observer of `kind` (a resume launch's subclass) for this
    run: every tensor of a microbatch recognised, and what `learned` says its inputs became
    (own_inputs); each one made is appended to `made`."""
    known = run_loop.positions(epochs, every_tensor=True) | (learned or {})
    total = sum(len(epoch[0]) for epoch in epochs)

    def observer(trainer: Trainer, model: torch.nn.Module, _: dict[bytes, int]) -> Observer:
        found = kind(trainer, model, known, microbatches=total)
        if made is not None:
            made.append(found)
        return found

    return observer


def own_inputs(
    trainer: Trainer, epochs: Epochs, rank: int, accum: int, device: str
) -> dict[bytes, int]:
    """For a loop that runs none of the check's tensors (texts a framework tokenizes itself),
    what its model ran on for each microbatch, from one run of it (ItemObserver.learned): a
    resume launch then recognises where it is, and where a restart came back. Empty where
    its inputs are the check's (no run needed)."""
    if run_loop.positions(epochs, every_tensor=True):
        return {}
    made: list[ItemObserver] = []
    run_loop.user_run(trainer, epochs, rank, accum, device, observer=observing(epochs, made=made))
    return made[0].learned()
