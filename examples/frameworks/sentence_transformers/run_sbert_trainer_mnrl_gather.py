"""sentence-transformers' own trainer over a run, as it ships: `SentenceTransformerTrainer
.train()` (6.2.0) with `MultipleNegativesRankingLoss(model, gather_across_devices=True)`,
`gradient_accumulation_steps=K`, `num_train_epochs=len(epochs)`,
`per_device_train_batch_size=ITEMS`, its own linear schedule (`lr_scheduler_type="linear"`, no
warm-up), the lab's optimizer, no clipping. The trainer (transformers' Trainer loop underneath)
cuts the windows; no trainer method is replaced (the subclass only notes, per microstep, the
divisor, the label count and DDP's sync).

    pclab check examples/frameworks/sentence_transformers/run_sbert_trainer_mnrl_gather.py --json

What the trainer does (sentence-transformers 6.2.0, transformers 5.24.0, accelerate 1.15.0,
torch 2.13.0; paths under site-packages/):

- The windows: transformers' `_run_epoch` (transformers/trainer.py:1827) cuts each epoch
  itself: `remainder = steps_in_epoch % K` (:1870), the epoch's last update fetches only
  `remainder` batches (:1877-1881), the sync step is `(step + 1) % K == 0 or (step + 1) ==
  steps_in_epoch` (:1897), earlier microsteps run under DDP's no_sync (:1915). Every epoch's
  tail (1 microbatch at M = 5, K = 2) is a window of its own and steps.
- The pool of each microstep: the trainer hands the loss one microbatch (ITEMS pairs) per
  microstep, with the DDP wrapper put into the loss (`override_model_in_loss`,
  sentence_transformers/base/trainer.py:504-510). The loss all-gathers the anchors and
  positives of that microstep from every rank with their gradient
  (sentence_transformer/losses/multiple_negatives_ranking.py:246-253,
  `torch.distributed.nn.all_gather`, util/distributed.py:54) and scores this rank's ITEMS
  anchors against the P x ITEMS positives of THAT microstep, the mean over its anchors (:337).
  Under Gloo the gather's backward sums every rank's gradient for a rank's rows
  (torch/distributed/nn/functional.py:412-423, AlltoAll + sum), and DDP averages over the P
  ranks: each microstep's gradient is that of the loss over the pool of every rank's items of
  that microstep alone (P x ITEMS pairs, one softmax). Accumulation does not enlarge the pool
  (sentence-transformers #2916); the other microsteps' items are never negatives.
- The scale: no batch holds "labels" (the collator names a label column "label", and there is
  none), so Trainer counts no items (`_get_num_items_in_batch`, trainer.py:2318) and
  `compute_loss` ignores `num_items_in_batch` anyway (base/trainer.py:470-521); Trainer
  divides each microstep's loss by `current_gradient_accumulation_steps = len(batch_samples)`
  (:1885, :2119): the window's own number of batches, K in a full window, 1 in the tail, not K.
  A window's update is thus the MEAN over its microsteps of each microstep's pool loss; the
  tail's is its one microstep's pool loss, undivided.
- The scheduler: Trainer steps its own scheduler once after each `optimizer.step()`
  (:1943-1952) over `max_steps = ceil(num_train_epochs x num_update_steps_per_epoch)`, with
  `num_update_steps_per_epoch = len // K + (len % K > 0)` (:2522-2529): the tails counted.

The data: `GLOBAL_BATCH = True`. The trainer takes only a `datasets.Dataset` (or a
DatasetDict / IterableDataset) for training: `_build_dataloader` raises for anything else
(base/trainer.py:908-920), so framework_run.EpochData (a torch Dataset) cannot be the
train_dataset, and a `datasets.Dataset`'s Arrow rows cannot change between epochs. The
adapter therefore stacks every epoch's pairs, each epoch in Accelerate's shard order
(framework_run.global_rows: for each microstep j, for each rank r, epochs[e][r][j]'s ITEMS
pairs), into ONE `datasets.Dataset` with columns anchor, positive, and lets the sampler pick
the epoch: framework_run.EpochRows serves epoch e's row numbers, in order, after
`set_epoch(e)`. The batch sampler is the library's own: `batch_sampler=` takes a callable
returning a DefaultBatchSampler (base/trainer.py:764-769, the documented extension of
SentenceTransformerTrainingArguments.batch_sampler), and the adapter's returns exactly what
`BatchSamplers.BATCH_SAMPLER` builds, `DefaultBatchSampler` (:788-789), over EpochRows instead
of a `RandomSampler` (that enum shuffles; `train_sampling_strategy="sequential"` does not
apply here: the trainer builds its own DataLoader, :925-944). `BatchSamplers.NO_DUPLICATES`
would not do: it shuffles (`randperm` seeded with seed + epoch, base/sampler.py:550, :622) and
defers a row any of whose texts is already in the batch to a later batch (:568-573,
:641-645), so rows change microbatch and rank (a 16-word vocabulary repeats texts); it also
draws from the whole (stacked) dataset. Accelerate prepares the DataLoader (base/trainer.py:940-941,
`even_batches=False`): `BatchSamplerShard` gives global batch i to process i mod P, so rank r
gets back its own microbatches in order. Its `DataLoaderShard.set_epoch` passes the epoch to
the sampler inside the batch sampler (accelerate/data_loader.py:630-635), called by Trainer
each epoch (trainer.py:1859-1860) and again as each pass starts (data_loader.py:582): the
check's epoch e is the trainer's epoch e. Under DDP the trainer's arguments force
`dataloader_drop_last=True` (base/training_args.py:209-217): a short microbatch would be
dropped and shift every later boundary, so every microbatch holds exactly ITEMS pairs (ITEMS,
checked in train_loop); ITEMS = 3, neither P nor K, so a batch cut across microbatches shows.

Measured with a driver (torchrun, P = 2, K = 2, two epochs of M = 5 microbatches a rank of
ITEMS pairs, SGD and AdamW): 6 optimizer steps, 3 an epoch on each rank; the record's
`divided_by` 2 2 2 2 1 an epoch, `synced` F T F T T, `num_items_in_batch` None, `epochs_set`
[0, 0, 1, 1], 20 forwards of 3 rows a rank (anchors, then positives, each microstep), each
exactly this rank's own microbatches in order, both epochs; the lr of each step 0.1 x (1 -
s / 6); the ranks' parameters equal. A one-process SGD replay of the run, each microstep's
pool over the ranks divided by the window's own size, gives the trained parameters to 3e-16;
one pool of the whole window misses them by 0.36.

Prediction for the check (to be confirmed by its run): the 4 full windows `microstep_pool`
(each microstep pooled alone over the ranks, the microsteps' losses averaged), not the
reference's global pool; the 2 tail windows (one microstep: its pool IS the window's, divided
by 1) equal to the reference at float64's floor; the schedule the intended one (6 updates,
linear, no warm-up: make_scheduler).

The model, its tokenizer, make_microbatch, embed and embedding_loss are sbert_model.py's
(float64, CPU); the quiet CPU arguments and the observing subclass hf_trainer's and
run_hf_trainer's. The trainer still computes its model card's dataset metadata and widget
examples at construction (one short progress bar on stderr; `random.choices` on Python's
global random, base/model_card.py:530); nothing is logged, saved, reported or evaluated.
run_resume_sbert_trainer_mnrl_gather.py runs this same trainer (`_train`), saving a checkpoint
after every update and resuming from the last. sentence_transformers is imported inside the
functions: only the ranks pay for the import.
"""

import functools
import sys
from pathlib import Path

from sbert_model import (
    build_model,
    counting_forwards,
    embed,
    embedding_loss,
    evidence,
    make_microbatch,
)

# run_hf_trainer.py and hf_trainer.py (Trainer's adapters) are in ../hf_trainer/,
# framework_run.py and framework_lm.py in ../shared/ (sbert_model put it on the path)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf_trainer"))

from framework_lm import StepCounter  # noqa: E402
from framework_run import EpochRows, global_rows  # noqa: E402
from hf_trainer import _QUIET, ONE_QUIET_STEP_ON_CPU, _quiet_and_fast  # noqa: E402
from run_hf_trainer import make_scheduler, observed  # noqa: E402

__all__ = ["DTYPE", "GLOBAL_BATCH", "ITEMS", "build_model", "embed", "embedding_loss"]
__all__ += ["make_microbatch", "make_scheduler", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
DTYPE = "float64"  # sbert_model's model
GLOBAL_BATCH = True  # every rank's epochs: the trainer's prepared DataLoader shards them
ITEMS = 3  # pairs a microbatch: the trainer's one per_device_train_batch_size


def train_loop(model, optimizer, epochs, accum_steps):
    """SentenceTransformerTrainer.train() over the run with MultipleNegativesRankingLoss(
    gather_across_devices=True): num_train_epochs = len(epochs), the lab's optimizer, the
    trainer's own linear scheduler, the pairs in the order handed out."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pcl-sbert-run-") as out:
        trainer, order, counter, rows = _train(model, optimizer, epochs, accum_steps, out)
    _record(trainer, order, counter, rows)


def _train(
    model, optimizer, epochs, accum_steps, output_dir, resume_from_checkpoint=None, **saving
):
    """The trainer, run: its windows, its scale, its scheduler; the data in the check's order.
    `saving`: TrainingArguments over ONE_QUIET_STEP_ON_CPU's (which saves nothing), and
    `resume_from_checkpoint` passed to `train()`: run_resume_sbert_trainer_mnrl_gather.py's."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers import PrinterCallback

    if not _QUIET:  # once per rank process, as hf_trainer.py's adapters do
        _quiet_and_fast()
        _QUIET.append(True)
    short = {len(mb["anchor"]) for ranks in epochs for rank in ranks for mb in rank} - {ITEMS}
    if short:  # a shorter microbatch would shift every later batch boundary
        raise ValueError(f"every microbatch must hold ITEMS = {ITEMS} pairs, not {short}")
    per_epoch = global_rows(epochs)  # epoch e's pairs: for each microstep j, each rank r
    order = EpochRows(len(epochs), len(per_epoch[0]))
    data = Dataset.from_list([pair for epoch in per_epoch for pair in epoch])  # anchor, positive

    args = SentenceTransformerTrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=ITEMS,
        gradient_accumulation_steps=accum_steps,
        num_train_epochs=len(epochs),
        batch_sampler=functools.partial(_in_order, order),  # picklable: saved in args
        lr_scheduler_type="linear",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping
        dataloader_drop_last=True,  # what the trainer sets under DDP anyway; no batch is short
        ddp_find_unused_parameters=False,  # every parameter takes part in every forward
        eval_strategy="no",
        dataloader_num_workers=0,
        seed=0,
        **(ONE_QUIET_STEP_ON_CPU | saving),
    )
    trainer = _observed(SentenceTransformerTrainer)(
        model=model,
        args=args,
        train_dataset=data,
        loss=MultipleNegativesRankingLoss(model, gather_across_devices=True),
        optimizers=(optimizer, None),  # the lab's optimizer, the trainer's own scheduler
    )
    trainer.remove_callback(PrinterCallback)
    counter = StepCounter(optimizer)
    rows, handle = counting_forwards(model)
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    handle.remove()
    return trainer, order, counter, rows


def _in_order(order, dataset, batch_size, drop_last, **kwargs):
    """BatchSamplers.BATCH_SAMPLER's own DefaultBatchSampler over the epoch's rows in order
    (`order`, an EpochRows) where that enum puts a RandomSampler. At module level, bound with
    functools.partial: a checkpoint pickles the arguments, batch_sampler included
    (training_args.bin, sentence_transformers/base/trainer.py:1029), and a function local to
    `_train` cannot be pickled."""
    from sentence_transformers.base.sampler import DefaultBatchSampler

    return DefaultBatchSampler(order, batch_size=batch_size, drop_last=drop_last, **kwargs)


def _observed(trainer_class):
    """run_hf_trainer's observing `trainer_class` (label count and DDP sync, per microstep),
    noting also what Trainer divides that microstep's loss by (without a label count:
    `current_gradient_accumulation_steps`, the window's own number of batches)."""

    class Observed(observed(trainer_class)):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.divided_by: list[int] = []  # per microstep

        def training_step(self, model, inputs, num_items_in_batch=None):
            self.divided_by.append(int(self.current_gradient_accumulation_steps))
            return super().training_step(model, inputs, num_items_in_batch)

    return Observed


def _record(trainer, order, counter, rows, adapter=ADAPTER, **more) -> None:
    """This rank's evidence that the trainer's own loop ran the run ($PCL_FRAMEWORK_RECORD);
    `adapter` and `more`: a resume adapter's name and what it resumed from."""
    sharded = trainer._train_dataloader.batch_sampler  # Accelerate's BatchSamplerShard
    evidence(
        adapter,
        trainer.loss,
        trainer.model_wrapped,
        rows,
        len(trainer.divided_by),
        global_step=trainer.state.global_step,
        max_steps=trainer.state.max_steps,
        optimizer_steps=counter.close(),
        scheduler_steps=trainer.lr_scheduler.last_epoch,
        scheduler=type(trainer.lr_scheduler).__name__,  # LambdaLR: the trainer's own
        distributed_type=trainer.accelerator.distributed_type.name,  # MULTI_CPU: Gloo
        sharded_by=type(sharded).__name__,
        batch_sampler=type(sharded.batch_sampler).__name__,  # DefaultBatchSampler
        epochs_set=order.data.epochs_set,
        num_items_in_batch=trainer.counted,  # per microstep: None (no "labels" column)
        divided_by=trainer.divided_by,  # per microstep: the window's own number of batches
        synced=trainer.synced,  # per microstep: True where DDP all-reduced
        **more,
    )
