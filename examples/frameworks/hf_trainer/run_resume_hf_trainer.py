"""The real Hugging Face `transformers.Trainer` over a run, RESUMABLE as its docs write it:
run_hf_trainer.py's `train()` (gradient_accumulation_steps = K, num_train_epochs =
len(epochs), its own linear schedule, the model's own loss) with `output_dir=checkpoint_dir`,
`save_strategy="steps"`, `save_steps=1` (a checkpoint-<global_step> folder after every
update) and, at start, `trainer.train(resume_from_checkpoint=get_last_checkpoint(dir))`, the
way transformers' example scripts (run_clm.py) find the checkpoint to resume from.

    pclab check examples/frameworks/hf_trainer/run_resume_hf_trainer.py --json

Measured (transformers 5.24.0, accelerate 1.15.0, torch 2.13.0, P = 2, K = 2, two epochs of 5
microbatches a rank: windows 2, 2 and a tail of 1; tests/runners/test_resume_frameworks.py
pins it): `same_run` at every kill point, the run itself run_hf_trainer.py's (`same_update`
in uneven and equal_counts, `scheduler_on_skip` in empty_window). In
site-packages/transformers/ (5.24.0):

- What is saved: `on_step_end` asks for a save when `global_step % save_steps == 0`
  (trainer_callback.py:586-589), which Trainer checks after each update, after
  `optimizer.step()`, `lr_scheduler.step()` and `zero_grad` (trainer.py:1950-1958):
  `_save_checkpoint` (trainer.py:3363-3417) writes the model, the optimizer and scheduler
  state_dicts, the RNG states and trainer_state.json (global_step). Never a partial window:
  with save_steps = 1 every checkpoint is at an update boundary.
- What resume restores: `_init_training_state` (trainer.py:1681-1713) reads global_step back
  and computes epochs_trained = global_step // updates_per_epoch (:1706) and the batches to
  skip, (global_step % updates_per_epoch) x K (:1708-1709); `_run_epoch` skips them with
  Accelerate's skip_first_batches (:1850-1855); the optimizer (AdamW's step counts) and the
  scheduler come back whole (`_load_optimizer_and_scheduler`, trainer.py:3894).
- mid_epoch and mid_window (killed at the forward of microbatch 3, then 4) both resume from
  checkpoint-1 (2 batches skipped): a kill in the middle of a window re-runs that window from
  its first microbatch, so nothing of #22143 (a partial window lost on resume) shows here:
  that needs a checkpoint taken inside a window, which save_strategy="steps" never writes.
- before_tail resumes from checkpoint-2 (4 batches skipped, the tail alone), epoch_boundary
  from checkpoint-3 (epoch 1, nothing skipped). `x K` counts each skipped update as K batches
  (transformers PR #8624's arithmetic), right here because an epoch's only short window is
  its last: no resume point ever lies past a tail within the same epoch.

transformers is imported inside the functions: only the ranks pay for the import.
"""

import sys
from pathlib import Path

from hf_trainer import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses
from run_hf_trainer import RECORD_ENV, make_scheduler, trainer_for

# framework_run.py (what the run adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_run import EpochData, global_rows, make_optimizer  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "GLOBAL_BATCH", "build_model"]
__all__ += ["make_optimizer", "make_scheduler", "token_losses", "train_loop"]
GLOBAL_BATCH = True  # every rank's epochs: Trainer's prepared DataLoader shards them
SAVE_EVERY_UPDATE = {"save_strategy": "steps", "save_steps": 1}


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """Trainer.train() over the run, a checkpoint after every update, resumed from the last."""
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(checkpoint_dir)  # None: nothing saved yet
    data = EpochData(global_rows(epochs))
    trainer = trainer_for(
        model, optimizer, data, epochs, accum_steps, checkpoint_dir, **SAVE_EVERY_UPDATE
    )
    trainer.train(resume_from_checkpoint=last)
    _record(trainer, data, last)


def _record(trainer, data, last) -> None:
    """Evidence that Trainer's own loop ran and resumed, for the tests (one JSON line a rank)."""
    import json
    import os

    path = os.environ.get(RECORD_ENV)
    if path:
        line = {
            "adapter": Path(__file__).stem,
            "rank": trainer.args.process_index,
            "resumed_from": None if last is None else Path(last).name,  # checkpoint-<step>
            "global_step": trainer.state.global_step,
            "scheduler_steps": trainer.lr_scheduler.last_epoch,
            "epochs_set": data.epochs_set,
            "num_items_in_batch": trainer.counted,
            "synced": trainer.synced,
        }
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
