"""DeepSpeed's own engine over a run, as its getting-started guide writes the loop: a DataLoader
walked once per epoch, for every batch `loss = engine(batch)`, `engine.backward(loss)`,
`engine.step()`, with `gradient_accumulation_steps = K` in the config, the lab's optimizer and
a client scheduler (the intended one, `make_scheduler`) handed to `deepspeed.initialize`, the
model's own mean loss. The engine cuts the windows; nothing here decides where one ends.

    pclab check examples/frameworks/deepspeed/run_deepspeed_engine.py --json

Measured (deepspeed 0.19.8, torch 2.13.0, float32, ZeRO stage 0, P = 2, K = 2, two epochs of
5 microbatches a rank: windows 2, 2 and a tail of 1): see tests/runners/test_run_frameworks.py,
which pins it. `tail_window_dropped` and `gradient_leak` in every scenario: 5 optimizer steps
where the reference takes 6. What the engine does, in site-packages/deepspeed/runtime/engine.py
(0.19.8):

- The windows: `is_gradient_accumulation_boundary()` is `(self.micro_steps + 1) %
  self.gradient_accumulation_steps() == 0` (engine.py:3456-3463) in managed accumulation (the
  default); `micro_steps` is set to 0 once, in `__init__` (:538), and `step()` adds 1 to it
  after every call (:3680), so it counts microsteps over the whole run, never per epoch: the
  engine knows nothing of the DataLoader or its end. `step()` takes the model step only on a
  boundary (:3611-3615, `_take_model_step`). So epoch 0's tail (its 5th microbatch, micro_steps
  4) is no boundary and does not step; epoch 1's first microbatch (micro_steps 5) is, and that
  update holds the tail's gradient and its own: the tail never steps as its own window and
  leaks into the next epoch's first update (the check: `tail_window_dropped` at epoch 0,
  `gradient_leak` in epoch 1, weight x N 1.25 on microbatches the window does not hold). From
  there every window of epoch 1 is shifted by one microbatch ((e0 tail, e1 #0), (#1, #2),
  (#3, #4)), so epoch 1 happens to end on a boundary: 2 + 3 = 5 steps, global_steps 5,
  micro_steps 10 (the record). With an odd number of epochs the last one's tail would be left
  accumulated and never stepped at all.
- The scale: `backward` divides every loss by `gradient_accumulation_steps()` (:3413), K,
  whatever the window holds; the gradients are all-reduced (a mean over the ranks,
  `allreduce_bucket`, :3795-3812) only on a boundary (`allreduce_gradients`, :3082-3094); the
  full windows of epoch 0 are `microbatch_mean` (each microbatch's mean / K, then / P).
- The scheduler: a client scheduler object passed to `deepspeed.initialize(lr_scheduler=...)`
  is kept as is (`_configure_lr_scheduler`, :1883-1890) and stepped in `_take_model_step`
  (:3543-3545) right after `optimizer.step()` (:3516) and the engine's `zero_grad()`
  (:3532): once per engine update, 5 in all on a schedule built for 6; its rates are the
  intended ones at the engine's own updates, so from epoch 1 on each update takes the rate
  meant for the one before it (the tail took no step): the check, reading a loop whose steps
  are not the windows step by step, says `own_steps` built for the run's 6 (no schedule code).
- A window with no label (N = 0, empty_window): the engine still steps there (its gradients
  are exactly zero, SGD changes nothing) and so does the client scheduler; the check names
  what the dropped tail does (`tail_window_dropped`, `gradient_leak`) and no schedule code
  (`schedule.matches` is None: no single stepping explains rates both shifted by the tail and
  advanced at the skip).

(`managed_gradient_accumulation: false` in the config, engine.py:3456-3459, 3595-3601, makes
every `step()` a boundary and leaves the window to the caller; the guide's loop, measured
here, does not set it.)

The data: `GLOBAL_BATCH = False`; this rank's epochs, each epoch's rows in order, are one
framework_run.EpochData behind one DataLoader of BATCH_SIZE rows a batch, and the loop calls
its `set_epoch(e)` at the start of each epoch as a DeepSpeed user does with a
DistributedSampler. The schedule's length is the loop's own count, as Accelerate's and
Trainer's compute it: ceil(len(loader) / K) updates an epoch. The engine settings (float32,
ZeRO stage 0, no clipping) are deepspeed_engine.py's.

deepspeed is imported inside the functions: only the ranks pay for the import.
"""

import math
import sys
from pathlib import Path

import torch
from deepspeed_engine import DTYPE, build_model, engine_config, quiet_deepspeed

# framework_lm.py and framework_run.py (what most adapters share) are in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import (  # noqa: E402
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    StepCounter,
    mean_loss,
    record,
    token_losses,
)
from framework_run import EpochData, make_scheduler, rows  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE", "build_model"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def engine_run(model, optimizer, epochs, accum_steps):
    """The guide's set-up for the run (and run_resume_deepspeed_engine.py's): this rank's
    epochs behind one DataLoader, the engine over the lab's optimizer and the intended client
    schedule for the loop's own count of updates. (engine, its optimizer, its scheduler, the
    data, the loader, that count)."""
    deepspeed = quiet_deepspeed()
    data = EpochData([[row for mb in epoch for row in rows(mb)] for epoch in epochs])
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH_SIZE)
    num_updates = math.ceil(len(loader) / accum_steps) * len(epochs)  # the loop's own count
    engine, engine_optimizer, _, engine_scheduler = deepspeed.initialize(
        model=model,
        optimizer=optimizer,
        lr_scheduler=make_scheduler(optimizer, num_updates),
        config=engine_config(accum_steps, zero_optimization={"stage": 0}),
    )
    return engine, engine_optimizer, engine_scheduler, data, loader, num_updates


def train_loop(model, optimizer, epochs, accum_steps):
    """DeepSpeed's loop over the run: len(epochs) passes over one DataLoader, the engine
    stepping at its own accumulation boundaries."""
    counter = StepCounter(optimizer)
    engine, engine_optimizer, engine_scheduler, data, loader, num_updates = engine_run(
        model, optimizer, epochs, accum_steps
    )
    microsteps = []  # per microstep: (epoch, the engine's micro_steps, its boundary)
    for epoch in range(len(epochs)):
        data.set_epoch(epoch)
        for batch in loader:
            loss = mean_loss(engine(batch["input_ids"]), batch["labels"])
            boundary = engine.is_gradient_accumulation_boundary()  # all-reduce and step here
            microsteps.append([epoch, engine.micro_steps, boundary])
            engine.backward(loss)
            engine.step()
    record(
        ADAPTER,
        global_steps=engine.global_steps,
        micro_steps=engine.micro_steps,
        gradient_accumulation_steps=engine.gradient_accumulation_steps(),
        wrapped_in=type(engine).__name__,  # DeepSpeedEngine
        zero_stage=engine.zero_optimization_stage(),
        backend=torch.distributed.get_backend(),  # the lab's Gloo group
        optimizer_is_the_one_passed=engine_optimizer is optimizer,
        scheduler=type(engine_scheduler).__name__,  # LambdaLR: the client's, as passed
        scheduler_steps=engine_scheduler.last_epoch,
        num_updates=num_updates,
        batches_per_epoch=len(loader),
        epochs_set=data.epochs_set,
        microsteps=microsteps,
        optimizer_steps=counter.close(),
    )
