"""DeepSpeed's own engine over a run, RESUMABLE as its getting-started guide writes it
(docs/_tutorials/getting-started.md, "Model Checkpointing"): after a batch,
`engine.save_checkpoint(save_dir, ckpt_id, client_state={"step": step})`; at start,
`_, client_sd = engine.load_checkpoint(load_dir)`, `step = client_sd["step"]` and the data
loader advanced past that step (`dataloader_to_step(data_loader, step + 1)`). The loop is
run_deepspeed_engine.py's (`loss = engine(batch)`, `engine.backward(loss)`, `engine.step()`,
gradient_accumulation_steps = K, the lab's AdamW and the intended client scheduler handed to
`deepspeed.initialize`): the engine cuts the windows.

    pclab check examples/frameworks/deepspeed/run_resume_deepspeed_engine.py --json

The guide saves `if step % args.save_interval:`, that is at every step that is NOT a
multiple of the interval (with an interval of 1, never); this adapter saves after every
batch, what an interval of 1 is meant to do, with the step as the checkpoint's tag (the guide
uses the loss value) and `load_checkpoint`'s default tag, the `latest` file save_checkpoint
writes. `step` counts the batches of the whole run (the guide's loop is one pass): the epoch
to start in and the batches to skip in it are divmod(step + 1, batches an epoch).

Measured (deepspeed 0.19.8, torch 2.13.0, float32, ZeRO stage 0, P = 2, K = 2, two epochs of
5 microbatches a rank: windows 2, 2 and a tail of 1; tests/runners/test_resume_frameworks.py
pins it). In site-packages/deepspeed/runtime/engine.py (0.19.8):

- What is saved: `_save_checkpoint` writes the module, the optimizer's state_dict (AdamW's
  moments and step counts), the client scheduler's state_dict, `global_steps`,
  `global_samples`, `skipped_steps` and the client state (engine.py:5377 onwards, the dict at
  :5026-5040). NOT `micro_steps`, the counter that cuts the windows
  (`is_gradient_accumulation_boundary`: `(micro_steps + 1) % K == 0`, :3456-3463), and NOT
  the gradients a window has accumulated so far.
- What resume restores: `_load_checkpoint` reads back global_steps, global_samples and
  skipped_steps (:4711-4713), the module, the optimizer and the scheduler; a fresh engine's
  `micro_steps` is 0 (:538). So a restart after a checkpoint taken inside a window (after
  its first microbatch, K = 2) starts counting windows again from the next microbatch: that
  microbatch is a window's first where it was its second, and the first microbatch's
  gradient is gone.

The run itself is run_deepspeed_engine.py's (`tail_window_dropped`, `gradient_leak`: the
engine counts microsteps over the run, so epoch 0's tail steps with epoch 1's first
microbatch). The data, the engine settings and the schedule's length are run_deepspeed_engine's
(`GLOBAL_BATCH = False`, this rank's epochs behind one DataLoader of BATCH_SIZE rows, its
`set_epoch(e)` each epoch). Every rank decides whether to resume before any rank saves (a
barrier): a rank that looked late would find the other's first checkpoint and resume alone.

deepspeed is imported inside the functions: only the ranks pay for the import.
"""

import itertools
import os
import sys
from pathlib import Path

import torch
from run_deepspeed_engine import (
    BATCH_SIZE,
    DTYPE,
    SEQ_LEN,
    VOCAB_SIZE,
    StepCounter,
    build_model,
    engine_run,
    make_scheduler,
    mean_loss,
    record,
    token_losses,
)

# framework_run.py (what the run adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_run import make_optimizer  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
LATEST = "latest"  # the file save_checkpoint writes, naming the newest tag


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """DeepSpeed's loop over the run, a checkpoint after every batch, resumed from the latest."""
    counter = StepCounter(optimizer)
    engine, _, scheduler, data, loader, _ = engine_run(model, optimizer, epochs, accum_steps)
    resume = os.path.exists(os.path.join(checkpoint_dir, LATEST))
    torch.distributed.barrier()  # decided on every rank before any rank saves
    step, resumed_from = -1, None  # the last batch done, over the run
    if resume:
        _, client_sd = engine.load_checkpoint(checkpoint_dir)  # the `latest` tag
        step = client_sd["step"]
        resumed_from = step + 1  # batches the checkpoint had done
    micro_steps_on_load = engine.micro_steps
    first_epoch, skip = divmod(step + 1, len(loader))  # the guide's dataloader_to_step
    for epoch in range(first_epoch, len(epochs)):
        data.set_epoch(epoch)
        batches = iter(loader)
        if epoch == first_epoch:
            batches = itertools.islice(batches, skip, None)
        for batch in batches:
            step += 1
            loss = mean_loss(engine(batch["input_ids"]), batch["labels"])
            engine.backward(loss)
            engine.step()
            engine.save_checkpoint(checkpoint_dir, f"step{step}", client_state={"step": step})
    record(
        ADAPTER,
        resumed_from=resumed_from,
        micro_steps_on_load=micro_steps_on_load,  # 0: a fresh engine's, checkpoint or not
        global_steps=engine.global_steps,  # restored by load_checkpoint, then counted on
        micro_steps=engine.micro_steps,
        scheduler_steps=scheduler.last_epoch,
        batches_per_epoch=len(loader),
        epochs_set=data.epochs_set,
        optimizer_steps=counter.close(),
    )
