"""Accelerate's checkpointing example (run_resume_accelerate.py: its loop, folders and resume
arithmetic), saving its state only after the batches where Accelerate stepped
(`accelerator.sync_gradients`: the end of a window, the tail's too), as the README's finding
on that file advises: a checkpoint is then always at an update boundary, and a restart after
a kill inside a window skips to the window's start and runs all of it again.

    pclab check examples/frameworks/accelerate/run_resume_accelerate_at_updates.py --json

Measured (accelerate 1.15.0, torch 2.13.0, P = 2, K = 2, two epochs of 5 microbatches a
rank; tests/runners/test_resume_frameworks.py pins it): the same run at all four kill points
(mid_window: killed at the forward of microbatch 4, resumed from 3, the window's start:
step_2 is the latest folder, `accelerator.step` comes back as 2, so microbatch 4 still
syncs). The run itself keeps run_accelerate_accumulate.py's codes: saving changes nothing
of how Accelerate divides the tail or steps its prepared scheduler.
"""

from pathlib import Path

from run_resume_accelerate import (
    BATCH_SIZE,
    GLOBAL_BATCH,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    make_optimizer,
    make_scheduler,
    resumable_loop,
    token_losses,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "GLOBAL_BATCH", "build_model"]
__all__ += ["make_optimizer", "make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """The example's loop, a checkpoint only at each update boundary."""
    resumable_loop(model, optimizer, epochs, accum_steps, checkpoint_dir, ADAPTER, False)
