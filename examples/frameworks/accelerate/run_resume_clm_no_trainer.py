"""transformers' `run_clm_no_trainer.py` over a run, RESUMABLE as the script is:
`--checkpointing_steps 1 --output_dir DIR`, and on restart `--resume_from_checkpoint
DIR/step_<n>` (the newest). The loop, the step arithmetic and the prepared scheduler are
run_clm_no_trainer.py's (the same `script_loop`); this file turns on the script's two blocks
that run_clm_no_trainer.py leaves off, in its order (commit
3e93524a13cf090daed5f0398f4f756d4390e27a):

- saving, after every batch and outside `accumulate`: `if completed_steps %
  checkpointing_steps == 0: accelerator.save_state(f"step_{completed_steps}")`. The count is
  of updates, but the test runs at every batch, so a batch inside a window saves again into
  the folder of the last update (step_1 is written after microbatch 2 and again after 3);
- resuming: `accelerator.load_state(path)`, then from the folder's name `resume_step = n x
  gradient_accumulation_steps` batches, `starting_epoch = resume_step //
  len(train_dataloader)`, `completed_steps = resume_step // gradient_accumulation_steps`,
  the rest skipped with `accelerator.skip_first_batches` in the starting epoch.

    pclab check examples/frameworks/accelerate/run_resume_clm_no_trainer.py --json

Measured (accelerate 1.15.0, transformers 5.24.0, torch 2.13.0, P = 2, K = 2, two epochs of
5 microbatches a rank: windows 2, 2 and a tail of 1; tests/runners/test_resume_frameworks.py
pins it): `different` at all four kill points. The run itself is run_clm_no_trainer.py's
(`tail_window_scaled`, `schedule_length`, `scheduler_on_skip` in empty_window). Two things
in the script's resume, each seen alone:

- The epoch is not restored. The prepared DataLoader tells the dataset its epoch from its
  own `iteration` at every pass (accelerate/data_loader.py:582, DataLoaderShard.set_epoch
  :622-639), which a fresh process starts at 0 and which save_state does not keep
  (checkpointing.py:130-146 saves a sampler only for an IterableDatasetShard with a seedable
  sampler, and a DataLoader's state only with `use_stateful_dataloader`, off by default);
  `skip_first_batches` returns a new DataLoaderShard with a copy of that `iteration`
  (data_loader.py:1446-1462), so passing over it advances the copy, not the
  script's `train_dataloader`. The script never calls `set_epoch`: after any restart, the
  epoch that follows is served as epoch 0 again (the record's `epochs_set`: [0, 0] for a
  restart in epoch 0, [0] for one in epoch 1). With a dataset or sampler that follows the
  epoch (this one; a `datasets.IterableDataset`, Accelerate's seedable sampler) epoch 0's
  data runs again and epoch 1's never: `data_replayed` and `data_skipped` at every point.
- The position is counted as updates x K. step_3, written after epoch 0's tail (5 batches,
  3 updates), resumes at 3 x 2 = 6 batches: epoch 1 with its first batch skipped
  (`data_skipped`, and `counter_reset` for the windows cut one batch later); here, with the
  epoch also served as 0, it is epoch 0's second batch. And a save
  inside a window rewrites the last update's folder: at mid_window step_1 holds
  `accelerator.step` 3, the restart runs microbatch 3 again as a window of its own
  (`counter_reset`; its first gradient was never stepped, so nothing is counted twice).

The same file calling `train_dataloader.set_epoch(epoch)` before each epoch (measured once,
not bundled) is the same run at mid_epoch and before_tail, `counter_reset` at mid_window and
`data_skipped`, `counter_reset` at epoch_boundary: the arithmetic alone. huggingface/
transformers#24186 fixed `completed_steps` in this block (it had been the batch count); the
batch count itself is still updates x K.

What differs from the script: run_clm_no_trainer.py's (the model, no evaluation, no
tracking), AdamW instead of the check's SGD (its step count shows a lost optimizer state, as
in run_resume_correct.py), the newest folder picked by its n (the script's own search by
ctime never runs: run_clm_no_trainer.latest_checkpoint), and a barrier before any save (the
script takes the path from its command line, before the launch: without it a rank that
looked late would find the other's first folder and resume alone).

transformers and accelerate are imported inside the functions: only the ranks pay for them.
"""

import sys
from pathlib import Path

from run_clm_no_trainer import (
    BATCH_SIZE,
    FIRST_POSITION_LABELLED,
    GLOBAL_BATCH,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    make_microbatch,
    make_scheduler,
    script_loop,
    token_losses,
)

# framework_run.py (what the run adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_run import make_optimizer  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "FIRST_POSITION_LABELLED", "GLOBAL_BATCH"]
__all__ += ["build_model", "make_microbatch", "make_optimizer", "make_scheduler"]
__all__ += ["token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """The script's loop, saving with --checkpointing_steps 1, resumed from the newest step_<n>."""
    script_loop(model, optimizer, epochs, accum_steps, checkpoint_dir, ADAPTER)
