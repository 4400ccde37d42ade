"""Hugging Face Accelerate's own loop over a run, as its guides write it: a prepared DataLoader
walked once per epoch, each batch inside `accelerator.accumulate(model)`, the model's own mean
loss, `accelerator.backward`, then `optimizer.step()`, `scheduler.step()`, `optimizer.zero_grad()`
on a prepared optimizer and a PREPARED scheduler. Accelerate cuts the windows.

    pclab check examples/frameworks/accelerate/run_accelerate_accumulate.py --json

Measured (accelerate 1.15.0, torch 2.13.0, P = 2, K = 2, two epochs of 5 microbatches a
rank: windows 2, 2 and a tail of 1): see tests/runners/test_run_frameworks.py, which pins it.
What Accelerate does, in site-packages/accelerate/ (1.15.0):

- The windows: `accumulate()` calls `_do_sync()` (accelerator.py:1230-1237): at the end of a
  prepared dataloader (`gradient_state.end_of_dataloader`, with `sync_with_dataloader` True by
  default, state.py:1283-1285) it syncs and resets its step counter, else it syncs every K-th
  call. `DataLoaderShard.__iter__` looks one batch ahead and sets `end_of_dataloader = True`
  before yielding the last one (data_loader.py:577-606). So each epoch's tail IS a window of
  its own here: it all-reduces and steps (the optimizer steps only when `sync_gradients`,
  optimizer.py:169), and the next epoch starts a fresh window. (Iterating the check's plain
  lists instead of a prepared DataLoader, `end_of_dataloader` is always False (state.py:1293-
  1297: no active dataloader): the counter runs on across epochs, the tail is summed into the
  next epoch's first microbatch and a window straddles the epoch boundary.)
- The tail's scale: `accelerator.backward` divides every loss by `gradient_accumulation_steps`
  (accelerator.py:2851), the tail's too: a tail of k' microbatches is k'/K of what its own
  count would give (Lightning #19987's finding, in Accelerate).
- The scheduler: `AcceleratedScheduler.step` (scheduler.py:54-82) does nothing while
  `sync_gradients` is False, then steps the wrapped scheduler `num_processes` times at each
  update unless `split_batches` (scheduler.py:69-82): the rate at update u is the schedule's at
  P u (accelerate #2926), and a schedule built for the run's updates ends P times too early.

The data: `GLOBAL_BATCH = True`, so this rank is handed every rank's epochs; each epoch's rows
go, in order (no shuffling), into one DataLoader that Accelerate prepares and shards
(`BatchSamplerShard`: batch i to process i mod P), which hands this rank its own microbatches
back; `framework_run.EpochData.set_epoch` is called by Accelerate's `DataLoaderShard` at the
start of each pass (data_loader.py:582, 622-639), so the check's epoch e is the prepared
dataloader's e-th pass and its end is the dataloader's end. The schedule's length is the
loop's own count, as Accelerate's examples compute it from the prepared dataloader:
ceil(len(dataloader) / K) updates an epoch.

accelerate is imported inside the functions: only the ranks pay for the import.
"""

import math
import sys
from pathlib import Path

import torch
from accelerate_accumulate import accelerator_for

# framework_lm.py and framework_run.py (what most adapters share) are in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import (  # noqa: E402
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    StepCounter,
    build_model,
    mean_loss,
    record,
    token_losses,
)
from framework_run import EpochData, global_rows, make_scheduler  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "GLOBAL_BATCH", "build_model"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
GLOBAL_BATCH = True  # every rank's epochs: Accelerate's prepared DataLoader shards them


def train_loop(model, optimizer, epochs, accum_steps):
    """Accelerate's loop over the run: len(epochs) passes over one prepared DataLoader."""
    accelerator = accelerator_for(accum_steps)
    data = EpochData(global_rows(epochs))
    loader = accelerator.prepare(torch.utils.data.DataLoader(data, batch_size=BATCH_SIZE))
    num_updates = math.ceil(len(loader) / accum_steps) * len(epochs)  # the loop's own count
    scheduler = make_scheduler(optimizer, num_updates)
    counter = StepCounter(optimizer)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    microsteps = []  # per microstep: (DDP all-reduced, the dataloader's end, sync_gradients)
    for _ in range(len(epochs)):
        for batch in loader:
            with accelerator.accumulate(model):
                loss = mean_loss(model(batch["input_ids"]), batch["labels"])
                accelerator.backward(loss)
                microsteps.append(
                    [
                        model.require_backward_grad_sync,
                        accelerator.gradient_state.end_of_dataloader,
                        accelerator.sync_gradients,
                    ]
                )
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
    record(
        ADAPTER,
        distributed_type=accelerator.distributed_type.name,  # MULTI_CPU: Gloo
        wrapped_in=type(model).__name__,  # DistributedDataParallel
        scheduler_wrapped_in=type(scheduler).__name__,  # AcceleratedScheduler
        batches_per_epoch=len(loader),
        num_updates=num_updates,
        epochs_set=data.epochs_set,  # by Accelerate's DataLoaderShard, each pass
        microsteps=microsteps,
        optimizer_steps=counter.close(),
        scheduler_steps=scheduler.scheduler.last_epoch,
    )
