"""The training loop of transformers' `run_clm_no_trainer.py` example over a whole run, with its
own step arithmetic: `Accelerator(gradient_accumulation_steps=K)`, the training DataLoader
(`default_data_collator`), `num_update_steps_per_epoch = ceil(len(train_dataloader) / K)` and
`max_train_steps = num_train_epochs x num_update_steps_per_epoch` taken BEFORE
`accelerator.prepare`, the linear schedule built from them and prepared, both recomputed after
prepare, then per epoch and batch, inside `accelerator.accumulate(model)`: `outputs =
model(**batch)`, `loss = outputs.loss`, `accelerator.backward(loss)`, `optimizer.step()`,
`lr_scheduler.step()`, `optimizer.zero_grad()`; `completed_steps += 1` when
`accelerator.sync_gradients`, and `break` at `max_train_steps`. The script is
huggingface/transformers examples/pytorch/language-modeling/run_clm_no_trainer.py at commit
3e93524a13cf090daed5f0398f4f756d4390e27a (the one clm_no_trainer_padded.py drives for one
update): its "Scheduler and math around the number of training steps" block,

    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    if args.max_train_steps is None:
        args.max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
        overrode_max_train_steps = True
    lr_scheduler = get_scheduler(...,
        num_warmup_steps=args.num_warmup_steps * accelerator.num_processes,
        num_training_steps=args.max_train_steps if overrode_max_train_steps
        else args.max_train_steps * accelerator.num_processes)

its recomputation after prepare ("We need to recalculate our total training steps as the size
of the training dataloader may have changed") and its `for epoch in range(starting_epoch,
args.num_train_epochs)` loop. It is driven here, not copied: the calls are its calls, in its
order, with `--max_train_steps` not given (the script's default: `overrode_max_train_steps`).

    pclab check examples/frameworks/accelerate/run_clm_no_trainer.py --json

Measured (accelerate 1.15.0, transformers 5.24.0, torch 2.13.0, P = 2, K = 2, two epochs of 5
microbatches a rank: windows 2, 2 and a tail of 1): see tests/runners/test_run_frameworks.py,
which pins it. `tail_window_scaled` 0.5 in every scenario, `scheduler_on_skip` in
empty_window, and a schedule that reaches 0 one update early (`schedule_length`, uneven and
equal_counts):

- The windows and the tail: Accelerate's, as in run_accelerate_accumulate.py: `accumulate()`
  syncs at every K-th microstep and at the prepared dataloader's end (accelerator.py:1230-1237,
  data_loader.py:577-606): every epoch's tail is a window of its own and steps (6 optimizer
  steps, `completed_steps` 6 = the recomputed `max_train_steps`); `accelerator.backward`
  divides every loss by K (accelerator.py:2849-2851), the tail's too, and `outputs.loss` is
  each microbatch's own mean: full windows `microbatch_mean`, the tail k'/K = 1/2 of its own
  (`tail_window_scaled` 0.5; in equal_counts the full windows are `global_token`).
- The schedule's length: with `--max_train_steps` not given, the script builds the schedule
  from the UNPREPARED DataLoader, every rank's batches: ceil(P M / K) = ceil(10 / 2) = 5
  updates an epoch, 10 for the run (the record's `scheduler_length`), and passes it as is
  (`overrode_max_train_steps`: not x num_processes). The prepared scheduler then steps P = 2
  times at each update (`AcceleratedScheduler.step`, accelerate/scheduler.py:69-82; 12
  scheduler steps in the record). Without a tail that is right: P x M / K per epoch, stepped P
  times an update, is the true schedule. With one it is not: each rank's tail is a window of
  its own (P ceil(M / K) = 6 updates an epoch), but the global count ceil(P M / K) merges the
  P tails into one window. So the rate at update u is the linear schedule's at 2u of 10
  (transformers/optimization.py:101-104: max(0, (10 - 2u) / 10)), that is the intended linear
  schedule built for 5 updates where the run takes 6: 0.1, 0.08, ..., 0.02 and 0 at the last
  update (epoch 1's tail steps at rate 0: it changes nothing), against 0.1, 0.083, ..., 0.017.
  The check's `schedule.matches` is "prepared_global" (the file's schedule sized from the
  global dataloader and stepped P times an update): `schedule_length`, built for 5 updates
  where the run takes 6.
- A window with no label (N = 0): `optimizer.step()` and `lr_scheduler.step()` run there as
  at any other window end (the loop has no such case; the optimizer's step changes nothing
  the check can see), and the prepared scheduler advances 2 steps: `scheduler_on_skip`
  (`schedule.matches` "skip_advances": the same rates are the intended schedule for the 5
  updates the reference takes, advanced at the skip).

What differs from the script: clm_no_trainer_padded.py's (its model, hf_trainer.py's tiny
Llama in float64; the check's optimizer, SGD; padded, masked rows; no evaluation, no
checkpointing, no tracking), and the DataLoader is not shuffled: `GLOBAL_BATCH = True`, each
epoch's rows of every rank, in order, are one framework_run.EpochData that Accelerate's
prepared DataLoader shards back to the ranks (batch i to process i mod P) and moves to the
next epoch itself (`DataLoaderShard.set_epoch`, accelerate/data_loader.py:582, 622-639).

transformers and accelerate are imported inside the functions: only the ranks pay for them.
"""

import math
import os
import re
import sys
from pathlib import Path

import torch
from accelerate_accumulate import accelerator_for
from clm_no_trainer_padded import (
    BATCH_SIZE,
    FIRST_POSITION_LABELLED,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    make_microbatch,
    token_losses,
)

# framework_lm.py and framework_run.py (what most adapters share) are in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import StepCounter, record  # noqa: E402
from framework_run import EpochData, global_rows  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "FIRST_POSITION_LABELLED", "GLOBAL_BATCH"]
__all__ += ["build_model", "make_microbatch", "make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
GLOBAL_BATCH = True  # every rank's epochs: the prepared DataLoader shards them
CHECKPOINTING_STEPS = 1  # --checkpointing_steps 1: checked after every batch, as the script does
STEP_DIR = re.compile(r"^step_(\d+)$")  # the script's checkpoint folders, f"step_{completed_steps}"


def make_scheduler(optimizer, num_updates):
    """The intended schedule: the script's `--lr_scheduler_type linear` (its default) without
    warm-up, over the run's true number of updates."""
    from transformers import get_scheduler

    return get_scheduler(
        "linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=num_updates
    )


def train_loop(model, optimizer, epochs, accum_steps):
    """run_clm_no_trainer.py's step arithmetic and loop over the run."""
    script_loop(model, optimizer, epochs, accum_steps, None, ADAPTER)


def latest_checkpoint(checkpoint_dir: str) -> str | None:
    """The `step_<n>` folder with the highest n (None: none yet): what a user restarting from
    the newest checkpoint passes as --resume_from_checkpoint. The script's own search for the
    most recent folder (by ctime) sits under a condition that is always true for a value
    (`is not None or != ""`), so it never runs: the path is the user's to give."""
    steps = [int(m[1]) for f in os.listdir(checkpoint_dir) if (m := STEP_DIR.match(f))]
    return None if not steps else os.path.join(checkpoint_dir, f"step_{max(steps)}")


def script_loop(model, optimizer, epochs, accum_steps, checkpoint_dir, adapter):
    """The script's loop; with a `checkpoint_dir`, also its `--checkpointing_steps 1
    --output_dir checkpoint_dir --resume_from_checkpoint <the latest step_<n>>` blocks, in its
    order (run_resume_clm_no_trainer.py). `adapter` names the evidence it records."""
    from transformers import default_data_collator, get_scheduler

    num_train_epochs, num_warmup_steps = len(epochs), 0  # --num_train_epochs, its default warm-up
    accelerator = accelerator_for(accum_steps)
    data = EpochData(global_rows(epochs))
    train_dataloader = torch.utils.data.DataLoader(
        data, collate_fn=default_data_collator, batch_size=BATCH_SIZE
    )
    counter = StepCounter(optimizer)
    # Scheduler and math around the number of training steps (before prepare)
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / accum_steps)
    max_train_steps = num_train_epochs * num_update_steps_per_epoch  # overrode_max_train_steps
    scheduler_length = max_train_steps
    lr_scheduler = get_scheduler(
        name="linear",
        optimizer=optimizer,
        num_warmup_steps=num_warmup_steps * accelerator.num_processes,
        num_training_steps=max_train_steps,  # overrode_max_train_steps: not x num_processes
    )
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler
    )
    # recalculated, as the size of the training dataloader may have changed
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / accum_steps)
    max_train_steps = num_train_epochs * num_update_steps_per_epoch
    num_train_epochs = math.ceil(max_train_steps / num_update_steps_per_epoch)
    completed_steps, starting_epoch, resume_step, resumed_from = 0, 0, None, None
    if checkpoint_dir is not None:
        resumed_from = latest_checkpoint(checkpoint_dir)
        accelerator.wait_for_everyone()  # decided on every rank before any rank saves
    if resumed_from is not None:  # the script's resume block, as it reads
        accelerator.load_state(resumed_from)
        training_difference = os.path.splitext(os.path.basename(resumed_from))[0]
        resume_step = int(training_difference.replace("step_", "")) * accum_steps
        starting_epoch = resume_step // len(train_dataloader)
        completed_steps = resume_step // accum_steps
        resume_step -= starting_epoch * len(train_dataloader)
    step_on_load, iteration_on_load = accelerator.step, train_dataloader.iteration
    microsteps = []  # per microstep: (DDP all-reduced, sync_gradients)
    for epoch in range(starting_epoch, num_train_epochs):
        model.train()
        active_dataloader = train_dataloader
        if resumed_from is not None and epoch == starting_epoch and resume_step is not None:
            active_dataloader = accelerator.skip_first_batches(train_dataloader, resume_step)
        for _step, batch in enumerate(active_dataloader):
            with accelerator.accumulate(model):
                outputs = model(**batch)
                loss = outputs.loss
                accelerator.backward(loss)
                microsteps.append([model.require_backward_grad_sync, accelerator.sync_gradients])
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                completed_steps += 1
            if checkpoint_dir is not None and completed_steps % CHECKPOINTING_STEPS == 0:
                accelerator.save_state(os.path.join(checkpoint_dir, f"step_{completed_steps}"))
            if completed_steps >= max_train_steps:
                break
    resumed = (
        {}
        if checkpoint_dir is None
        else {
            "resumed_from": resumed_from and os.path.basename(resumed_from),
            "accumulate_step_on_load": step_on_load,  # accelerator.step restored by load_state
            "iteration_on_load": iteration_on_load,  # the prepared DataLoader's epoch: not saved
        }
    )
    record(
        adapter,
        distributed_type=accelerator.distributed_type.name,  # MULTI_CPU: Gloo
        wrapped_in=type(model).__name__,  # DistributedDataParallel
        scheduler_wrapped_in=type(lr_scheduler).__name__,  # AcceleratedScheduler
        scheduler_length=scheduler_length,  # from the unprepared DataLoader's length
        batches_per_epoch=len(train_dataloader),  # the prepared one's: this rank's
        max_train_steps=max_train_steps,
        completed_steps=completed_steps,
        epochs_set=data.epochs_set,
        microsteps=microsteps,
        optimizer_steps=counter.close(),
        scheduler_steps=lr_scheduler.scheduler.last_epoch,
        **resumed,
    )
