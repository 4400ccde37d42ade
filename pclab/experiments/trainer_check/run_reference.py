"""The run mode's reference: the same run in one process, as the protocol says it must go.

Every epoch is cut into windows of K microbatches a rank (the last a shorter tail when K does
not divide M); each window is one update on the window's objective over every rank's
microbatches of it (the global token mean: `token_window_loss`; a coupled loop's global pool:
coupled_run_rank.window_loss), its gradient norm clipped once to MAX_GRAD_NORM; a window with
N = 0 is skipped by everyone (no optimizer step, no scheduler step, no state change); the
file's make_scheduler, built for the true number of updates, is stepped once after each update.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import pclab.experiments.trainer_check.token_rank as token_rank
from pclab.experiments.trainer_check.mode_protocols import Batch
from pclab.experiments.trainer_check.states import State
from pclab.experiments.trainer_check.trainer import Trainer, reference_step, snapshot

Epochs = Sequence[Sequence[Sequence[Batch]]]  # [epoch][rank][microbatch]
# (trainer, model, the window's microbatches [rank][microbatch], N, reverse) -> the objective
WindowLoss = Callable[[Trainer, torch.nn.Module, list[list[Batch]], int, bool], torch.Tensor]


@dataclass(frozen=True)
class Window:
    """One window of the run: microbatches start .. end - 1 of epoch `epoch`, every rank."""

    epoch: int
    index: int  # within its epoch
    start: int
    end: int
    num_valid_labels: int  # N over every rank's microbatches of the window
    first_forward: int  # the run's forward count (per rank) at the window's first microbatch

    @property
    def microsteps(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Update:
    """The reference's update of one window (None for a skipped window's fields)."""

    window: Window
    lrs: tuple[float, ...] | None  # each param group's rate it stepped with; None: skipped
    state: State | None  # parameters and optimizer state after it; None: skipped


def windows(
    epochs: Epochs, accum_steps: int, counts: Sequence[Sequence[Sequence[int]]]
) -> list[Window]:
    """Every window of the run, in order; `counts`: [rank][epoch][microbatch] terms."""
    found: list[Window] = []
    forwards = 0
    for e, epoch in enumerate(epochs):
        m = len(epoch[0])
        for index, start in enumerate(range(0, m, accum_steps)):
            end = min(m, start + accum_steps)
            n = sum(sum(counts[r][e][start:end]) for r in range(len(counts)))
            found.append(Window(e, index, start, end, n, forwards + start))
        forwards += m
    return found


def true_updates(run_windows: Sequence[Window]) -> int:
    """The updates the run takes: its windows with N > 0."""
    return sum(1 for w in run_windows if w.num_valid_labels)


def intended_scheduler(trainer: Trainer, optimizer: Any, num_updates: int) -> Any:
    """The file's make_scheduler(optimizer, num_updates), or None without one."""
    if not trainer.has("make_scheduler"):
        return None
    return trainer.call("make_scheduler", optimizer, num_updates)


def token_window_loss(
    trainer: Trainer, model: torch.nn.Module, cells: list[list[Batch]], n: int, reverse: bool
) -> torch.Tensor:
    """The window's global token mean: every rank's terms summed, over N; `reverse`: summed
    in the opposite order (the reference's own floor)."""
    flat = [b for rank in cells for b in rank]
    losses = [token_rank.terms(trainer, model, b) for b in (flat[::-1] if reverse else flat)]
    total: torch.Tensor = sum(x.sum() for x in losses) / n
    return total


def run(
    trainer: Trainer,
    epochs: Epochs,
    run_windows: Sequence[Window],
    device: str,
    reverse: bool = False,
    window_loss: WindowLoss = token_window_loss,
) -> tuple[State, list[Update]]:
    """(the initial state, every window's update) of the one-process run; `reverse`: each
    window's microbatches in the opposite order (the reference's own floor); `window_loss`:
    the objective of one window."""
    model = trainer.build(device)
    initial = snapshot(model, torch.optim.SGD(model.parameters(), lr=0.0))
    optimizer = trainer.make_optimizer(model)
    scheduler = intended_scheduler(trainer, optimizer, true_updates(run_windows))
    updates: list[Update] = []
    for w in run_windows:
        if not w.num_valid_labels:
            updates.append(Update(w, None, None))
            continue
        cells = [list(rank[w.start : w.end]) for rank in epochs[w.epoch]]
        lrs = tuple(float(g["lr"]) for g in optimizer.param_groups)  # the ones it steps with
        loss = window_loss(trainer, model, cells, w.num_valid_labels, reverse)
        reference_step(trainer, model, optimizer, loss)
        if scheduler is not None:
            scheduler.step()
        updates.append(Update(w, lrs, snapshot(model, optimizer)))
    return initial, updates
