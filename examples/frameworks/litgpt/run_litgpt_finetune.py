"""litgpt's full fine-tuning loop over a run, as it ships: `litgpt.finetune.full.fit` with
`train.epochs = len(epochs)`, walking its own `CycleIterator` over one DataLoader, its own
windows (`iter_num % gradient_accumulation_iters`), its own loss (each microbatch's
`chunked_cross_entropy` mean / K) and litgpt's own schedule (`get_lr_scheduler`: a linear
warm-up, then cosine) built over the number of updates litgpt's `main` computes. litgpt cuts the
windows; no litgpt function is replaced.

    pclab check examples/frameworks/litgpt/run_litgpt_finetune.py --json   # litgpt's environment
    python -m bench.framework_env litgpt                  # builds it, records litgpt's rows

Measured (litgpt 0.5.13, lightning 2.6.1, torch 2.13.0, P = 2, K = 2, two epochs of 5
microbatches a rank): see tests/runners/test_litgpt.py, which pins it. What fit() does, in
site-packages/litgpt/finetune/full.py (0.5.13):

- The windows run across the epochs: `iter_num` counts microsteps over the whole run
  (full.py:272-281) and `CycleIterator` (utils.py:482-507) starts the next pass of the
  DataLoader where the last ended, so the epoch's tail is the first half of a window whose
  other half is the next epoch's first microbatch; the run's last window ends where the data
  ends only when the run's microsteps are a multiple of K. `zero_grad` follows every step
  (full.py:289-293): no gradient is lost or kept, the windows are merely cut elsewhere.
- Every loss is divided by K (full.py:285), whatever the window.
- The schedule's length: `steps_per_epoch = len(train_dataloader) // K` (full.py:144) and
  `lr_max_steps = epochs x steps_per_epoch` (full.py:145): floored per epoch, where the loop
  takes ceil(epochs x len / K) updates. The warm-up is `step / warmup_steps` (full.py:417), so
  warmup_steps must be at least 1 (0 divides by zero) and the first update's rate is 0.
- At the run's end fit() fetches one batch past the data (`next(train_iterator)` before its
  `epoch >= train.epochs` test, full.py:274-277): the DataLoader's third pass starts, its
  first batch is read and dropped.

What is set here: Fabric's "ddp" strategy and the optimizer's class and settings, as
litgpt_finetune.py sets them and for the same reasons; the schedule is litgpt's own with one
warm-up step (the fewest it allows). The data: this rank's epochs, in order, one DataLoader
(litgpt's SFT collate function, no distributed sampler: the check has split them); litgpt calls
no `set_epoch`, so `PassSampler` tells the data which epoch is served by the pass the
CycleIterator starts (its epoch counter is the same count). The model, token_losses and the
record are litgpt_finetune.py's.

litgpt is imported inside the functions: only the ranks pay for it.
"""

import sys
from pathlib import Path

import torch
from litgpt_finetune import (
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    _fabric,
    _optimizer_spec,
    _rows,
    build_model,
    fit_quietly,
    token_losses,
)

# framework_lm.py and framework_run.py (what most adapters share) are in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import StepCounter, record  # noqa: E402
from framework_run import EpochData  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_scheduler"]
__all__ += ["token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record
WARMUP_STEPS = 1  # litgpt's warm-up divides by it: 1 is the fewest it takes


def make_scheduler(optimizer, num_updates):
    """The intended schedule: litgpt's own (`get_lr_scheduler`, one warm-up step, then cosine)
    over the run's true number of updates."""
    from litgpt.finetune.full import get_lr_scheduler

    return get_lr_scheduler(optimizer, warmup_steps=WARMUP_STEPS, max_steps=num_updates)


class PassSampler(torch.utils.data.SequentialSampler):
    """In order; each pass over the DataLoader serves the next epoch of its EpochData. A pass
    past the last epoch serves the last again (fit() reads one batch of it and drops it)."""

    def __init__(self, data: EpochData) -> None:
        super().__init__(data)
        self.passes = 0

    def __iter__(self):
        self.data_source.set_epoch(min(self.passes, len(self.data_source.items) - 1))
        self.passes += 1
        return super().__iter__()


def train_loop(model, optimizer, epochs, accum_steps):
    """litgpt's fit() over len(epochs) passes of this rank's microbatches."""
    litgpt_run(model, optimizer, epochs, accum_steps, ADAPTER)


def litgpt_run(model, optimizer, epochs, accum_steps, adapter, checkpoint_dir=None):
    """litgpt's main() and fit() over len(epochs) passes of this rank's microbatches. With a
    `checkpoint_dir`: a checkpoint after every step there (`--train.save_interval 1`), and a
    launch that finds one loads it into fit()'s state as main() does (`--resume auto`,
    full.py:165-168)."""
    import torch.distributed as dist
    from litgpt.args import TrainArgs
    from litgpt.data.base import get_sft_collate_fn
    from litgpt.finetune import full
    from litgpt.utils import find_resume_path, instantiate_torch_optimizer

    world = dist.get_world_size()
    fabric = _fabric(world)
    module = fabric.setup(model)
    owned = instantiate_torch_optimizer(_optimizer_spec(optimizer), module.parameters())
    counter = StepCounter(owned)
    owned = fabric.setup_optimizers(owned)
    train = TrainArgs(
        save_interval=None if checkpoint_dir is None else 1,
        log_interval=10**9,  # no metrics printed
        global_batch_size=world * accum_steps * BATCH_SIZE,  # gradient_accumulation_iters = K
        micro_batch_size=BATCH_SIZE,
        lr_warmup_steps=WARMUP_STEPS,
        epochs=len(epochs),
    )
    data = EpochData([_rows(epoch) for epoch in epochs])
    collate = get_sft_collate_fn()
    train_loader = torch.utils.data.DataLoader(
        data, batch_size=BATCH_SIZE, sampler=PassSampler(data), collate_fn=collate
    )
    # the sanity check fit() runs first (two eval forwards, no gradient): epoch 0's first rows
    val_loader = torch.utils.data.DataLoader(
        _rows(epochs[0][:1]), batch_size=BATCH_SIZE, collate_fn=collate
    )
    loaders = fabric.setup_dataloaders(train_loader, val_loader, use_distributed_sampler=False)
    # litgpt's main() (full.py:144-145, 162), which builds the schedule fit() steps
    steps_per_epoch = len(loaders[0]) // train.gradient_accumulation_iters(world)
    lr_max_steps = min(train.epochs * steps_per_epoch, (train.max_steps or float("inf")))
    scheduler = full.get_lr_scheduler(owned, warmup_steps=WARMUP_STEPS, max_steps=lr_max_steps)
    state = {"model": module, "optimizer": owned, "scheduler": scheduler}
    state |= {"iter_num": 0, "step_count": 0}
    resume = None if checkpoint_dir is None else find_resume_path("auto", Path(checkpoint_dir))
    if resume:
        fabric.load(resume, state)
    resumed_at = (state["iter_num"], state["step_count"])
    fit_quietly(fabric, state, loaders, train, saves_to=checkpoint_dir, resume=resume)
    record(
        adapter,
        iter_num=state["iter_num"],  # microsteps fit() counted (the last read past the data)
        step_count=state["step_count"],  # its optimizer steps
        lr_max_steps=lr_max_steps,  # the updates its schedule was built for
        epochs_set=data.epochs_set,  # one per pass the CycleIterator started
        optimizer_steps=counter.close(),
        resumed_from=resume.parent.name if resume else None,  # step-<n>: the checkpoint
        resumed_at=resumed_at,  # (iter_num, step_count) it restored
    )
