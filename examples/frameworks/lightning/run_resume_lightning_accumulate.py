"""PyTorch Lightning's own fit loop over a run, RESUMABLE as Lightning's docs write it:
run_lightning_accumulate.py's Trainer (accumulate_grad_batches = K, max_epochs = len(epochs),
strategy="ddp", a per-step scheduler of Lightning's own length) with a
`ModelCheckpoint(dirpath=checkpoint_dir, every_n_train_steps=1, save_last=True)` callback (a
checkpoint after every optimizer step, `last.ckpt` its copy) and, at start,
`trainer.fit(module, loader, ckpt_path="last")`: the documented way to pick up the latest
checkpoint, None (a warning, a fresh start) while there is none. Lightning cuts the windows
and resumes; the DataLoader is the run adapter's, a plain one (no `state_dict`).

    pclab check examples/frameworks/lightning/run_resume_lightning_accumulate.py --json

Measured (lightning 2.6.6, torch 2.13.0, P = 2, K = 2, two epochs of 5 microbatches a rank:
windows 2, 2 and a tail of 1; tests/runners/test_resume_frameworks.py pins it):

- The run itself is run_lightning_accumulate.py's: `different` in every scenario,
  `tail_window_scaled` (uneven, empty_window, equal_counts) and `scheduler_on_skip`
  (empty_window): checkpointing changes nothing of how Lightning steps.
- epoch_boundary (killed at the forward of the second epoch's first microbatch): `same_run`.
  last.ckpt was written after the tail (global_step 3, batch_progress.current ready 5,
  completed 4); the restart completes that batch, finds the epoch done and starts epoch 1
  from its first batch.
- mid_epoch and mid_window (killed at the forward of microbatch 3, then 4): both resume from
  last.ckpt at global_step 1 (ready 2, completed 1) and get `data_replayed`, `data_skipped`
  and `counter_reset`. Weights, AdamW and the scheduler come back whole (no
  `optimizer_state_lost`, no `scheduler_reset`), and so does the batch counter: but the
  DataLoader starts the epoch again from its first microbatch, so counted batch 3 is
  microbatch 1 (accumulated), batch 4 is microbatch 2 (a step: window 0 again), batch 5 is
  microbatch 3, "the last batch" by the restored count, stepped alone: microbatches 4 and 5
  are never run that epoch. The restarted launch took 5 optimizer steps, global_step ends at
  6 and the schedule at 6 steps, as in the straight run: every count is right, the data is
  not.
- before_tail (killed at the forward of microbatch 5, the tail): from global_step 2 (ready
  4): counted batch 5, the epoch's last, is microbatch 1, stepped alone, and the tail is
  never run: the same three codes.
- `counter_reset` is a step after microbatch 3 (mid_epoch) or 1 (before_tail), where no
  window ends. Lightning's counter was restored, not reset: it is the data that started over
  under it, the case the check's message names beside `data_replayed` ("a restored counter
  ran over data served again from an earlier point"). The fix (not
  measured here) is the one Lightning's warning names: a resumable DataLoader
  (`state_dict`/`load_state_dict`, e.g. torchdata's StatefulDataLoader), whose state
  Lightning saves and loads (fit_loop.py:521-525, 552-556), or checkpoints only at epoch
  ends.

What Lightning saves and restores, in site-packages/lightning/pytorch/ (2.6.6):

- When it saves: `ModelCheckpoint.on_train_batch_end` (callbacks/model_checkpoint.py:340-485)
  saves when `global_step % every_n_train_steps == 0` (:429) unless
  `_last_global_step_saved == trainer.global_step` (:631): global_step counts optimizer steps
  (loops/training_epoch_loop.py:112-116), so a batch that only accumulated is never saved and
  every checkpoint is at an update boundary (the tail's included). `_save_last_checkpoint`
  (:906-925) writes `last.ckpt`; at the epoch's end `on_train_epoch_end` finds that step
  already saved (:490, :631) and writes nothing more.
- What a checkpoint holds: `dump_checkpoint` (trainer/connectors/checkpoint_connector.py:
  415-511) writes the module's state_dict (:449), the loops' progress (:450,
  `_get_loops_state_dict`, :516-522), the optimizer's whole state_dict (:467: AdamW's step
  counts) and the schedulers' (:473). The epoch loop's `batch_progress` is saved inside
  on_train_batch_end (training_epoch_loop.py:375), before its `completed` is counted (:379).
  Not the position in a DataLoader unless the loader is stateful (fit_loop.py:521-525 saves
  `combined_loader` state only for loaders with `state_dict`).
- `ckpt_path="last"`: `_parse_ckpt_path` (checkpoint_connector.py:181-194) takes the newest
  `last*.ckpt` of the callback's dirpath (model_checkpoint.py:867-877), None (a warning)
  while there is none.
- What resume restores: the model (checkpoint_connector.py:272-289), the loops
  (`restore_loops`, :331-365), the optimizer and the schedulers (:367-404). The epoch loop
  sees it was saved at on_train_batch_end (training_epoch_loop.py:168-175), completes that
  batch (:203-204) and keeps the saved `batch_progress.current` (:212-215): the window cut
  (`_accumulated_batches_reached`, :438-440, `current.ready % K`) and the epoch's end
  (`_num_ready_batches_reached`, :442-445, `current.ready == num_training_batches`) go on
  from the saved count. A checkpoint after the epoch's last batch starts the next epoch
  (training_epoch_loop.py:206-210; fit_loop.py:398-404).
- The data: a fresh iterator of the same DataLoader, from the epoch's first batch; only the
  fetcher's count is moved on (training_epoch_loop.py:249), nothing skips the batches the
  checkpoint had done when the loader is not stateful (fit_loop.py:552-556 loads loader
  state only if some was saved). Lightning says so itself, as a PossibleUserWarning: "You're
  resuming from a checkpoint that ended before the epoch ended and your dataloader is not
  resumable. This can cause unreliable results if further training is done."
  (training_epoch_loop.py:223-230). set_epoch gets the restored epoch (fit_loop.py:445), so
  the epoch served is right.

lightning is imported inside the functions: only the ranks pay for the import.
"""

import os
import sys
from pathlib import Path

from run_lightning_accumulate import fit_parts, run_trainer, scheduled_module_class

# framework_lm.py and framework_run.py (what most adapters share) are in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import (  # noqa: E402
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    record,
    token_losses,
)
from framework_run import make_optimizer, make_scheduler  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def resumable_module_class():
    """run_lightning_accumulate's LightningModule, noting what the checkpoint it resumed
    from held (evidence only: Lightning restores it)."""

    class Resumable(scheduled_module_class()):
        loaded = None

        def on_load_checkpoint(self, checkpoint):
            progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
            self.loaded = {
                "global_step": checkpoint["global_step"],
                "epoch": checkpoint["epoch"],
                "batch_progress_current": progress["current"],
            }

    return Resumable


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """Lightning's fit over the run, a checkpoint after every optimizer step, resumed from
    the last (`ckpt_path="last"`)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    module, counter, data, loader = fit_parts(resumable_module_class(), model, optimizer, epochs)
    checkpoint = ModelCheckpoint(dirpath=checkpoint_dir, every_n_train_steps=1, save_last=True)
    trainer = run_trainer(epochs, accum_steps, checkpoint_dir, callbacks=[checkpoint])
    trainer.fit(module, train_dataloaders=loader, ckpt_path="last")
    record(
        ADAPTER,
        resumed_from=module.loaded,  # None: a fresh start
        ckpt_path=None if trainer.ckpt_path is None else Path(trainer.ckpt_path).name,
        global_step=trainer.global_step,
        current_epoch=trainer.current_epoch,
        epochs_set=data.epochs_set,
        scheduler_length=module.scheduler_length,
        scheduler_steps=trainer.lr_scheduler_configs[0].scheduler.last_epoch,
        optimizer_steps=counter.close(),  # this launch's
        grad_sync=module.grad_sync,
        saved=sorted(os.listdir(checkpoint_dir)),
    )
