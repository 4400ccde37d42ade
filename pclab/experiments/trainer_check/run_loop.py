"""The run mode's one run of the file's own train_loop, watched (run_observe.Observer): on a
fresh model and optimizer, with this rank's epochs (every rank's with GLOBAL_BATCH), a fresh
checkpoint folder for a resumable loop. The check runs it with the file's optimizer (the
update compared with the reference), with SGD at learning rate 1 (the steps rank 0 solves
for their weights: run_solve.py), from other starting points (`moved`) when one replay
cannot tell those weights apart, and killed and restarted (resume_worker.py).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

import pclab.experiments.trainer_check.run_contract as run_contract
from pclab.experiments.trainer_check.run_observe import Observer, Step, fingerprint, state_read
from pclab.experiments.trainer_check.run_reference import Epochs
from pclab.experiments.trainer_check.states import State
from pclab.experiments.trainer_check.trainer import Trainer, on_device, snapshot


def _loop_input(trainer: Trainer, epochs: Epochs, rank: int, model: torch.nn.Module) -> Any:
    """What train_loop is handed: this rank's epochs (or, GLOBAL_BATCH, every rank's)."""
    if trainer.global_batch:
        return [[[on_device(b, model) for b in rows] for rows in epoch] for epoch in epochs]
    return [[on_device(b, model) for b in epoch[rank]] for epoch in epochs]


def positions(epochs: Epochs, every_tensor: bool = False) -> dict[bytes, int]:
    """Every microbatch's input fingerprint -> its index in the run (from 1), the same index
    on every rank (the observer tells which one the loop just ran): its first tensor's, or
    (`every_tensor`: a coupled loop may run the model once per column, queries then
    documents) each of its tensors'."""
    m = len(epochs[0][0])
    found: dict[bytes, int] = {}
    for e, epoch in enumerate(epochs):
        for rows in epoch:
            for j, batch in enumerate(rows):
                tensors = [t for t in batch.values() if isinstance(t, torch.Tensor)]
                for tensor in tensors if every_tensor else tensors[:1]:
                    key = fingerprint((tensor,), {})
                    if key is not None:
                        found.setdefault(key, e * m + j + 1)
    return found


@contextmanager
def shared_folder(rank: int) -> Iterator[str]:
    """A fresh, empty folder every rank sees (made by rank 0 on this host, its name
    broadcast), removed afterwards: a resumable loop's checkpoint_dir for one run."""
    import torch.distributed as dist

    made = [tempfile.mkdtemp(prefix="pcl_checkpoint_") if rank == 0 else None]
    dist.broadcast_object_list(made, src=0)
    try:
        yield str(made[0])
        # every rank's loop has ended, its last save written, before the folder goes: a rank
        # still saving (Accelerate's save_state after the last batch) found it gone (measured:
        # a false not_resumable, "step_10 does not exist", once in a few runs)
        dist.barrier()
    finally:
        if rank == 0:
            shutil.rmtree(str(made[0]), ignore_errors=True)


ObserverFactory = Callable[[Trainer, torch.nn.Module, dict[bytes, int]], Observer]


def user_run(
    trainer: Trainer,
    epochs: Epochs,
    rank: int,
    accum: int,
    device: str,
    sgd: bool = False,
    start: int = 0,
    observer: ObserverFactory = Observer,
) -> tuple[list[Step], State, State]:
    """The file's train_loop on a fresh model, watched: (its steps, its final state, its
    parameters as the loop left them); `sgd`: SGD at learning rate 1 for the file's optimizer;
    `start` > 0: from another starting point (`moved`). A resumable loop gets an empty
    checkpoint_dir of its own: a run from the start."""
    if run_contract.resumable(trainer.module):
        with shared_folder(rank) as folder:
            return watched_run(
                trainer, epochs, rank, accum, device, sgd, folder, observer, start=start
            )
    return watched_run(trainer, epochs, rank, accum, device, sgd, observer=observer, start=start)


def moved(model: torch.nn.Module, start: int) -> None:
    """Every parameter moved by a normal offset of half its own size (its RMS, or 1 for a
    zero tensor), seeded by `start` alone so that every rank moves the same way: another
    starting point for the same loop, whose gradients differ where the model is nonlinear in
    its parameters (a linear regression's too: its gradient is affine in them)."""
    generator = torch.Generator().manual_seed(start)
    with torch.no_grad():
        for p in model.parameters():
            size = float(p.detach().double().pow(2).mean().sqrt()) if p.numel() else 0.0
            offset = torch.randn(p.shape, generator=generator, dtype=torch.float64)
            p.add_((offset * 0.5 * (size or 1.0)).to(p.dtype).to(p.device))


def watched_run(
    trainer: Trainer,
    epochs: Epochs,
    rank: int,
    accum: int,
    device: str,
    sgd: bool = False,
    checkpoint_dir: str | None = None,
    observer: ObserverFactory = Observer,
    start: int = 0,
) -> tuple[list[Step], State, State]:
    """user_run's run: `checkpoint_dir` the resumable loop's folder; `observer` makes the
    Observer (a resume launch's records each step as it goes, and may kill the rank; a
    coupled loop's places steps by items: coupled_run_rank.ItemObserver)."""
    model = trainer.build(device)
    if start:
        moved(model, start)
    if sgd:
        optimizer: Any = torch.optim.SGD(model.parameters(), lr=1.0)
    else:
        optimizer = trainer.make_optimizer(model)
    if trainer.has("fresh_start"):
        trainer.call("fresh_start")
    given = _loop_input(trainer, epochs, rank, model)
    folder = () if checkpoint_dir is None else (checkpoint_dir,)
    with observer(trainer, model, positions(epochs)) as seen:
        trainer.call("train_loop", model, optimizer, given, accum, *folder)
    named = trainer.parameters(model, stepped_by_user=True)
    final = snapshot(
        model, optimizer, named, with_optimizer=bool(seen.steps) and state_read(seen.steps)
    )
    return seen.steps, final, named
