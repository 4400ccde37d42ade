"""Hugging Face Accelerate's own loop over a run, RESUMABLE the way Accelerate documents it.
The cadence, folder names and resume arithmetic are its checkpointing example's
(huggingface/accelerate examples/by_feature/checkpointing.py with `--checkpointing_steps 1`):
after every batch, `accelerator.save_state(f"{checkpoint_dir}/step_{overall_step}")`; at
start, the latest `step_<n>` folder is loaded with `accelerator.load_state`, n //
len(dataloader) is the epoch to start in and the rest of n is skipped with
`accelerator.skip_first_batches`, as the checkpoint guide's "Restoring the state of the
DataLoader" says (docs/source/usage_guides/checkpoint.md; the example itself skips them with
`continue`). The loop itself is run_accelerate_accumulate.py's (`accumulate`, a prepared
DataLoader, a PREPARED scheduler): Accelerate cuts the windows and steps.

    pclab check examples/frameworks/accelerate/run_resume_accelerate.py --json

Measured (accelerate 1.15.0, torch 2.13.0, P = 2, K = 2, two epochs of 5 microbatches a
rank: windows 2, 2 and a tail of 1; tests/runners/test_resume_frameworks.py pins it):

- The run itself is run_accelerate_accumulate.py's: `different` in every scenario,
  `tail_window_scaled` (uneven, empty_window, equal_counts) and `scheduler_rate` (uneven,
  equal_counts): saving and resuming changes nothing of how Accelerate steps.
- mid_epoch (killed at the forward of microbatch 3, the first of window 2): `same_run`. The
  latest folder is step_2, a window boundary: weights, AdamW and the prepared scheduler come
  back whole (no `optimizer_state_lost`, no `scheduler_reset`; the scheduler's count is P
  times the updates, as in the uninterrupted run), and skip_first_batches(2) starts there.
- mid_window (killed at the forward of microbatch 4, the second of window 2):
  `window_gradient_lost`. step_3 was written after the window's first microbatch; load_state
  restores `accelerator.step` = 3 (checkpointing.py:157, 296; accelerator.py:3925), so the
  window is still cut where it was (no `counter_reset`: microbatch 4 syncs, accelerator.py:
  1236-1237), but the first microbatch's gradient was in `.grad` only, which save_state never
  writes: the window steps on its second microbatch alone (OneTrainer PR #1465's finding).
  Saving every batch, as the example's `--checkpointing_steps` counts them, makes every
  checkpoint inside a window such a one; saving only where `accelerator.sync_gradients` is
  True would restart the window from its start (run_resume_accelerate_at_updates.py: measured,
  the same run at every kill point).
- before_tail (killed at the forward of microbatch 5, the tail): `same_run` (step_4).
- epoch_boundary (killed at the forward of the second epoch's first microbatch): `same_run`.
  step_5 was saved after the tail, where `_do_sync` had reset `accelerator.step` to 0 at the
  prepared dataloader's end (accelerator.py:1232-1233); 5 // len(dataloader) = epoch 1, 0
  batches to skip.

What `save_state` keeps (accelerate 1.15.0, site-packages/accelerate/):
- the prepared model's weights (accelerator.py:3713, model.safetensors), the prepared
  optimizers' whole state_dict (accelerator.py:3723, optimizer.bin: AdamW's moments and step
  counts) and the prepared schedulers' (accelerator.py:3733, scheduler.bin): a scheduler
  passed through `prepare` is registered and saved;
- per process, the RNG states and `accelerator.step`, the `accumulate` counter that cuts the
  windows (checkpointing.py:156-160, restored by load_state at checkpointing.py:296-297 and
  accelerator.py:3924-3925);
- NOT the gradients: nothing in save_accelerator_state (checkpointing.py:63-181) reads a
  parameter's `.grad`. A checkpoint written in the middle of a window restores the counter
  at that microstep but not what the window had accumulated;
- NOT the position in the data unless the dataloader is stateful (checkpointing.py:141-145,
  `use_stateful_dataloader`, off by default): hence the example's `step_<n>` folder name and
  `skip_first_batches` (accelerator.py:4314-4340, a DataLoaderShard with `skip_batches`,
  data_loader.py:1446-1462, which keeps the look-ahead that marks the dataloader's end,
  data_loader.py:577-610).

The epoch: a fresh process's prepared DataLoader starts at `iteration` 0 and tells the dataset
that epoch at each pass (data_loader.py:582); the loop calls the prepared loader's own
`set_epoch(epoch)` (data_loader.py:622-639, "in case it is manually passed in") before each
pass so the resumed run's epoch e serves epoch e (skip_first_batches copies `iteration`,
data_loader.py:1460). The folder picked is the highest n (the example sorts by ctime: the same
folder here, one process writing them in order). Every rank picks it before any rank saves
(`wait_for_everyone`): the example picks it from its command line, before the launch; without
the barrier a rank that lists the folder late sees the other's first step_1 (a first
microbatch never all-reduces) and resumes alone (measured: a Gloo timeout).

accelerate is imported inside the functions: only the ranks pay for the import.
"""

import math
import os
import re
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
from framework_run import EpochData, global_rows, make_optimizer, make_scheduler  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "GLOBAL_BATCH", "build_model"]
__all__ += ["make_optimizer", "make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
GLOBAL_BATCH = True  # every rank's epochs: Accelerate's prepared DataLoader shards them
STEP_DIR = re.compile(r"^step_(\d+)$")  # the example's checkpoint folders


def latest_step(checkpoint_dir: str) -> int | None:
    """The batches the latest `step_<n>` folder had done (None: no checkpoint yet)."""
    steps = [int(m[1]) for f in os.listdir(checkpoint_dir) if (m := STEP_DIR.match(f))]
    return max(steps) if steps else None


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """Accelerate's loop over the run, saving its state after every batch and resuming from
    the latest."""
    resumable_loop(model, optimizer, epochs, accum_steps, checkpoint_dir, ADAPTER, True)


def resumable_loop(model, optimizer, epochs, accum_steps, checkpoint_dir, adapter, every_batch):
    """The example's loop: its state saved after every batch (`every_batch`), or only after
    the batches where Accelerate stepped (`accelerator.sync_gradients`: an update boundary,
    run_resume_accelerate_at_updates.py); `adapter` names the evidence it records."""
    accelerator = accelerator_for(accum_steps)
    data = EpochData(global_rows(epochs))
    loader = accelerator.prepare(torch.utils.data.DataLoader(data, batch_size=BATCH_SIZE))
    num_updates = math.ceil(len(loader) / accum_steps) * len(epochs)  # the loop's own count
    scheduler = make_scheduler(optimizer, num_updates)
    counter = StepCounter(optimizer)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    overall_step, starting_epoch, resume_step = 0, 0, 0
    resumed_from = latest_step(checkpoint_dir)  # the example's --resume_from_checkpoint
    accelerator.wait_for_everyone()  # decided on every rank before any rank saves
    if resumed_from is not None:  # the example's resume
        accelerator.load_state(os.path.join(checkpoint_dir, f"step_{resumed_from}"))
        overall_step = resumed_from
        starting_epoch, resume_step = divmod(resumed_from, len(loader))
    step_on_load = accelerator.step
    for epoch in range(starting_epoch, len(epochs)):
        loader.set_epoch(epoch)
        active = loader
        if epoch == starting_epoch and resume_step:
            active = accelerator.skip_first_batches(loader, resume_step)
        for batch in active:
            with accelerator.accumulate(model):
                loss = mean_loss(model(batch["input_ids"]), batch["labels"])
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            overall_step += 1
            if every_batch or accelerator.sync_gradients:
                accelerator.save_state(os.path.join(checkpoint_dir, f"step_{overall_step}"))
    record(
        adapter,
        resumed_from=resumed_from,  # batches the loaded checkpoint had done
        accumulate_step_on_load=step_on_load,  # accelerator.step restored by load_state
        scheduler_wrapped_in=type(scheduler).__name__,  # AcceleratedScheduler
        batches_per_epoch=len(loader),
        epochs_set=data.epochs_set,
        optimizer_steps=counter.close(),
        scheduler_steps=scheduler.scheduler.last_epoch,
    )
