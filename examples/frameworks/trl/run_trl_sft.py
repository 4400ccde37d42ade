"""TRL's `SFTTrainer` over a run, as it ships: `train()` with `gradient_accumulation_steps=K`,
`num_train_epochs=len(epochs)`, text data it tokenizes and labels itself, its own default
scheduler (linear, no warm-up), its default clipping at 1.0 (MAX_GRAD_NORM), the lab's
optimizer. SFTTrainer (transformers' Trainer loop underneath) cuts the windows; no trainer
method is replaced.

    pclab check examples/frameworks/trl/run_trl_sft.py --json

Measured (trl 1.16.0, transformers 5.24.0, accelerate 1.15.0, torch 2.13.0, float32, P = 2,
K = 2, two epochs of 5 microbatches a rank): see tests/runners/test_run_frameworks.py, which
pins it. As transformers' Trainer over a run (run_hf_trainer.py), whose loop SFTTrainer runs:
the same update in uneven and equal_counts (every window `global_token`, the tails included,
float32's floor: max_abs_diff 3e-8 and 1.2e-7), `scheduler_on_skip` in empty_window. Where:

- The windows and the tail: Trainer's `_run_epoch` (transformers/trainer.py:1827, 5.24.0)
  cuts each epoch itself, the last update of an epoch fetching only the `remainder` batches
  (:1870-1881) and syncing at `(step + 1) == steps_in_epoch` (:1897): every tail steps (the
  record's `synced`: F, T, F, T, T an epoch, 6 optimizer steps).
- The scale: Trainer counts the window's own labels over both ranks
  (`_get_num_items_in_batch`, trainer.py:2335-2350: the record's `num_items_in_batch`, 34 34
  34 34 29 | 46 46 30 30 11 in uneven, the tail's own count); SFTTrainer's `compute_loss`
  (trl/trainer/sft_trainer.py:1610-1618) sums its fused head's per-token losses and divides
  by that count, then multiplies by the number of processes (:1621-1624), which DDP's mean
  takes back. Its collator, `DataCollatorForLanguageModeling` (:87), pads the labels with
  -100 (:201-203): the padding is no term.
- The schedule: SFTConfig keeps TrainingArguments' `lr_scheduler_type="linear"` without
  warm-up; Trainer steps it once after each `optimizer.step()` (trainer.py:1936-1952) over
  `max_steps` = 6 (ceil(5 / 2) x 2, :2522-2529): the intended schedule in uneven and
  equal_counts (`schedule.matches` "intended").
- A window with no label (N = 0): Trainer still calls `optimizer.step()` and
  `lr_scheduler.step()` there (:1936-1952); SFTTrainer's loss is a finite 0 (its count is
  clamped to 1, sft_trainer.py:1617-1618), the gradients exactly zero, SGD changes nothing,
  but the schedule, built for 6 updates where the reference takes 5, advances:
  `scheduler_on_skip` (`schedule.matches` "skip_advances_all").
- The clipping: SFTConfig's default `max_grad_norm=1.0` clips each window once, before the
  step, as the reference does (MAX_GRAD_NORM).

The data: `GLOBAL_BATCH = True`; each epoch's documents of every rank, in order, as text
(trl_sft.py's make_microbatch: BATCH_SIZE documents a microbatch). SFTTrainer takes only a
`datasets.Dataset` or `IterableDataset` (trl/trainer/sft_trainer.py:661-676 raise TypeError
otherwise) and prepares it once, in `__init__` (:1018-1028, `_prepare_dataset`: end of
sequence appended, tokenized, labels copied from input_ids), so a run whose epochs hold
different documents cannot be one train_dataset. The adapter gives SFTTrainer epoch 0's
text, prepares every other epoch's text with the same trainer's own `_prepare_dataset` (same
tokenizer, same arguments), and serves them by epoch: `train_dataset` is set to a
framework_run.EpochData of the prepared epochs before `train()`. That is the only thing done
outside TRL; Trainer then builds its own DataLoader over it (prepared and sharded by
Accelerate: batch i to process i mod P; its collator TRL's, the unused "text" column removed
by Trainer's RemoveColumnsCollator), calls `set_epoch(epoch)` each epoch (trainer.py:1859-1860;
Accelerate's DataLoaderShard again as each pass starts, accelerate/data_loader.py:582: the
record's `epochs_set` is [0, 0, 1, 1]), so the check's epoch e is Trainer's epoch e, and runs
its loop unchanged. The model, its fused LM head, token_losses and the quiet CPU arguments
are trl_sft.py's; float32 (DTYPE).

trl is imported inside the functions: only the ranks pay for the import.
"""

import sys
import tempfile
from pathlib import Path

from trl_sft import (
    _QUIET,
    BATCH_SIZE,
    DTYPE,
    MAX_GRAD_NORM,
    ONE_QUIET_STEP_ON_CPU,
    SEQ_LEN,
    _quiet_and_fast,
    build_model,
    make_microbatch,
    token_losses,
    tokenizer,
)

# run_hf_trainer.py (Trainer's run adapter) is in ../hf_trainer/ (trl_sft put it on the path),
# framework_run.py and framework_lm.py in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import StepCounter, record  # noqa: E402
from framework_run import EpochData, global_rows  # noqa: E402
from run_hf_trainer import make_scheduler, observed  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "GLOBAL_BATCH", "MAX_GRAD_NORM", "SEQ_LEN", "build_model"]
__all__ += ["make_microbatch", "make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
GLOBAL_BATCH = True  # every rank's epochs: Trainer's prepared DataLoader shards them


def train_loop(model, optimizer, epochs, accum_steps):
    """SFTTrainer.train() over the run: num_train_epochs = len(epochs), the lab's optimizer,
    SFTTrainer's own scheduler and clipping."""
    with tempfile.TemporaryDirectory(prefix="pcl-trl-run-") as out:
        sft_loop(model, optimizer, epochs, accum_steps, out, ADAPTER)


def sft_loop(model, optimizer, epochs, accum_steps, output_dir, adapter, resume=False, **saving):
    """The run: SFTTrainer over the epochs' prepared text, writing into `output_dir` (with
    `saving`, TrainingArguments' save arguments: run_resume_trl_sft.py's) and, if `resume`,
    resumed from its last checkpoint there; `adapter` names the evidence it records."""
    import datasets
    from transformers import PrinterCallback
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig, SFTTrainer

    if not _QUIET:
        _quiet_and_fast()
        _QUIET.append(True)
    last = get_last_checkpoint(output_dir) if resume else None  # None: nothing saved yet
    texts = [
        datasets.Dataset.from_dict({"text": [r["text"] for r in epoch]})
        for epoch in global_rows(epochs)
    ]
    counter = StepCounter(optimizer)
    args = SFTConfig(
        output_dir=output_dir,
        per_device_train_batch_size=BATCH_SIZE,
        gradient_accumulation_steps=accum_steps,
        num_train_epochs=len(epochs),
        train_sampling_strategy="sequential",
        bf16=False,  # bf16=True, SFTConfig's default, autocasts to bfloat16
        ddp_find_unused_parameters=False,
        seed=0,
        **(ONE_QUIET_STEP_ON_CPU | saving),
    )
    trainer = observed(SFTTrainer)(
        model=model,
        args=args,
        train_dataset=texts[0],
        processing_class=tokenizer(),
        optimizers=(optimizer, None),  # the lab's optimizer, SFTTrainer's own scheduler
    )
    trainer.remove_callback(PrinterCallback)
    prepared = [trainer.train_dataset] + [
        trainer._prepare_dataset(text, trainer.processing_class, args, args.packing, None, "train")
        for text in texts[1:]
    ]
    data = EpochData(prepared)
    trainer.train_dataset = data
    trainer.train(resume_from_checkpoint=last)
    resumed = {"resumed_from": None if last is None else Path(last).name} if resume else {}
    record(
        adapter,
        global_step=trainer.state.global_step,
        max_steps=trainer.state.max_steps,
        optimizer_steps=counter.close(),
        scheduler_steps=trainer.lr_scheduler.last_epoch,
        scheduler=type(trainer.lr_scheduler).__name__,  # LambdaLR: Trainer's own, not prepared
        distributed_type=trainer.accelerator.distributed_type.name,  # MULTI_CPU: Gloo
        wrapped_in=type(trainer.model_wrapped).__name__,  # DistributedDataParallel
        collator=type(trainer.data_collator).__name__,
        columns=prepared[0].column_names,  # what SFTTrainer's preparation made of the text
        epochs_set=data.epochs_set,
        num_items_in_batch=trainer.counted,  # per microstep, as Trainer passed it on
        synced=trainer.synced,  # per microstep: True where DDP all-reduced
        max_grad_norm=trainer.args.max_grad_norm,
        lr_scheduler_type=str(trainer.args.lr_scheduler_type),
        **resumed,
    )
