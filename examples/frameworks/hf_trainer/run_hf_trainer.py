"""The real Hugging Face `transformers.Trainer` over a run, as it ships: `train()` with
`gradient_accumulation_steps=K`, `num_train_epochs=len(epochs)`, its own linear schedule
(`lr_scheduler_type="linear"`, no warm-up), `average_tokens_across_devices=True` (the default),
the model's own causal-LM loss. Trainer cuts the windows; no Trainer method is replaced.

    pclab check examples/frameworks/hf_trainer/run_hf_trainer.py --json

Measured (transformers 5.24.0, accelerate 1.15.0, torch 2.13.0, P = 2, K = 2, two epochs of 5
microbatches a rank): see tests/runners/test_run_frameworks.py, which pins it. What Trainer
does, in site-packages/transformers/trainer.py (5.24.0):

- The windows: `_run_epoch` (trainer.py:1827) cuts each epoch into updates itself:
  `remainder = steps_in_epoch % gradient_accumulation_steps` (:1870-1872), and the epoch's last
  update fetches only `remainder` batches (:1877-1881, `get_batch_samples`); the sync step is
  `(step + 1) % K == 0 or (step + 1) == steps_in_epoch` (:1897): every epoch's tail is a window
  of its own and steps.
- The tail's scale (#38837, PR #38872): the label count is taken over the batches the window
  really holds (`_get_num_items_in_batch`, :2335-2350: `labels[..., 1:]` counted, then
  gathered over the ranks with `average_tokens_across_devices`); the model's loss is divided
  by it and multiplied by P (:2212-2215), which DDP's mean takes back. Without a count the
  loss is divided by `current_gradient_accumulation_steps = len(batch_samples)` (:1885,
  :2119): the window's own size, not K.
- The scheduler: Trainer steps its own scheduler once after each `optimizer.step()` (:1936-1952,
  not prepared by Accelerate), over `max_steps = ceil(num_train_epochs x
  num_update_steps_per_epoch)` with `num_update_steps_per_epoch = len // K + (len % K > 0)`
  (:2522-2529): the tails are counted.
- A window with no label (N = 0) still calls `optimizer.step()` and `lr_scheduler.step()`
  (:1936-1952 have no such case): its loss is 0/0, its gradients exactly zero (SGD then changes
  nothing), but the schedule advances, and it was built counting that window as an update.

The data: `GLOBAL_BATCH = True`; each epoch's rows of every rank, in order, are the
train_dataset (framework_run.EpochData), `train_sampling_strategy="sequential"` (no shuffling,
trainer.py:1142-1143), and Trainer's own DataLoader, prepared by Accelerate
(`_get_dataloader`, :1051), shards them back to the ranks (batch i to process i mod P).
Trainer calls `set_epoch(epoch)` on it each epoch (:1859-1860), which Accelerate's
DataLoaderShard passes to the dataset (accelerate/data_loader.py:638-639): the check's epoch e
is Trainer's epoch e. The model, token_losses and the quiet CPU arguments are hf_trainer.py's.

transformers is imported inside the functions: only the ranks pay for the import.
"""

import sys
import tempfile
from pathlib import Path

from hf_trainer import (
    _QUIET,
    BATCH_SIZE,
    ONE_QUIET_STEP_ON_CPU,
    SEQ_LEN,
    VOCAB_SIZE,
    _quiet_and_fast,
    build_model,
    token_losses,
)

# framework_run.py (what the run adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_run import EpochData, global_rows  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "GLOBAL_BATCH", "build_model"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]
GLOBAL_BATCH = True  # every rank's epochs: Trainer's prepared DataLoader shards them
RECORD_ENV = "PCL_HF_TRAINER_RECORD"  # a file: one JSON line per train_loop and rank (tests)


def make_scheduler(optimizer, num_updates):
    """The intended schedule: Trainer's own `lr_scheduler_type="linear"` without warm-up
    (get_linear_schedule_with_warmup) over the run's true number of updates."""
    from transformers import get_linear_schedule_with_warmup

    return get_linear_schedule_with_warmup(optimizer, 0, num_updates)


def observed(trainer_class):
    """`trainer_class` noting, per microstep, the label count it handed the loss and whether
    DDP all-reduced; Trainer's own step runs unchanged."""

    class Observed(trainer_class):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.counted: list = []  # num_items_in_batch, per microstep
            self.synced: list = []  # DDP's require_backward_grad_sync, per microstep

        def training_step(self, model, inputs, num_items_in_batch=None):
            self.counted.append(None if num_items_in_batch is None else int(num_items_in_batch))
            self.synced.append(bool(getattr(model, "require_backward_grad_sync", True)))
            return super().training_step(model, inputs, num_items_in_batch)

    return Observed


def trainer_for(model, optimizer, data, epochs, accum_steps, output_dir, **saving):
    """The Trainer this adapter runs (and run_resume_hf_trainer.py, with its `saving`
    arguments): num_train_epochs = len(epochs), the lab's optimizer, the Trainer's own
    linear scheduler, no clipping, no evaluation, sequential data, quiet on CPU."""
    from transformers import PrinterCallback, Trainer, TrainingArguments, default_data_collator

    if not _QUIET:  # once per rank process, as hf_trainer.py's adapters do
        _quiet_and_fast()
        _QUIET.append(True)
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=BATCH_SIZE,
        gradient_accumulation_steps=accum_steps,
        num_train_epochs=len(epochs),
        train_sampling_strategy="sequential",
        lr_scheduler_type="linear",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping
        ddp_find_unused_parameters=False,
        eval_strategy="no",
        dataloader_num_workers=0,
        seed=0,
        **(ONE_QUIET_STEP_ON_CPU | saving),
    )
    trainer = observed(Trainer)(
        model=model,
        args=args,
        train_dataset=data,
        data_collator=default_data_collator,
        optimizers=(optimizer, None),  # the lab's optimizer, Trainer's own scheduler
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def train_loop(model, optimizer, epochs, accum_steps):
    """Trainer.train() over the run: num_train_epochs = len(epochs), the lab's optimizer, the
    Trainer's own scheduler."""
    data = EpochData(global_rows(epochs))
    with tempfile.TemporaryDirectory(prefix="pcl-hf-trainer-") as out:
        trainer = trainer_for(model, optimizer, data, epochs, accum_steps, out)
        trainer.train()
    _record(trainer, data)


def _record(trainer, data) -> None:
    """Evidence that Trainer's own loop ran the run, for the tests (one JSON line a rank)."""
    import json
    import os

    path = os.environ.get(RECORD_ENV)
    if path:
        line = {
            "rank": trainer.args.process_index,
            "world_size": trainer.args.world_size,
            "global_step": trainer.state.global_step,
            "max_steps": trainer.state.max_steps,
            "scheduler_steps": trainer.lr_scheduler.last_epoch,
            "scheduler": type(trainer.lr_scheduler).__name__,  # LambdaLR: not prepared
            "distributed_type": trainer.accelerator.distributed_type.name,  # MULTI_CPU
            "wrapped_in": type(trainer.model_wrapped).__name__,  # DistributedDataParallel
            "epochs_set": data.epochs_set,
            "num_items_in_batch": trainer.counted,  # per microstep, as Trainer passed it on
            "synced": trainer.synced,  # per microstep: True where DDP all-reduced
        }
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
