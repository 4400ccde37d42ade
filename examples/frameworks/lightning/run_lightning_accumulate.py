"""PyTorch Lightning's own fit loop over a run, as its docs write gradient accumulation:
`Trainer(accumulate_grad_batches=K, max_epochs=len(epochs))`, strategy="ddp" on the CPU, a
LightningModule whose training_step returns the model's own mean loss, and a per-step
scheduler (`configure_optimizers` returns make_scheduler(optimizer,
self.trainer.estimated_stepping_batches) with interval "step"). Lightning cuts the windows.

    pclab check examples/frameworks/lightning/run_lightning_accumulate.py --json

Measured (lightning 2.6.6, torch 2.13.0, P = 2, K = 2, two epochs of 5 microbatches a rank):
see tests/runners/test_run_frameworks.py, which pins it. What Lightning does, in
site-packages/lightning/pytorch/ (2.6.6):

- The windows: `_should_accumulate` (loops/training_epoch_loop.py:447-454) accumulates until
  `batch_progress.current.ready % accumulate_grad_batches == 0` (:438-440) or the epoch's last
  batch (:442-445): each epoch's tail is stepped, as a window of its own, and the counter is
  the epoch's, so no window straddles two epochs.
- The tail's scale: every training_step's loss is divided by `trainer.accumulate_grad_batches`
  (loops/optimization/automatic.py:329 passes it as `normalize`, :83 divides), the tail's
  too: a tail of k' microbatches is k'/K of what its own count would give (Lightning #19987,
  open: "scaled by accumulate_grad_batches instead of the actual number of accumulations").
- The scheduler: with interval "step", `update_lr_schedulers` skips while accumulating
  (training_epoch_loop.py:456-460) and steps once per optimizer step, the tail's included;
  `estimated_stepping_batches` is ceil(batches / K) x max_epochs (trainer/trainer.py:1783),
  the run's true number of updates when no window is empty.
- The step: the window's LAST microbatch runs inside `optimizer.step(closure)`: Lightning
  calls training_step + backward from the closure it hands the optimizer
  (loops/optimization/automatic.py:174-192: `self._optimizer_step(batch_idx, closure)`;
  plugins/precision/precision.py:122-123 `optimizer.step(closure=closure)`), so that
  microbatch's forward comes after torch's optimizer step pre-hook.

The data: the rank's own microbatches, one DataLoader (batch_size=None: each item is a
microbatch) over framework_run.EpochData with framework_run.EpochSampler, whose set_epoch
Lightning's fit loop calls at each epoch start (loops/fit_loop.py:445 ->
lightning/fabric/utilities/data.py:415-436), so epoch e of the fit is the check's epoch e.
`use_distributed_sampler=False` only keeps Lightning from splitting the rank's own
microbatches across the processes a second time.

lightning is imported inside the functions: only the ranks pay for the import.
"""

import sys
import tempfile
from pathlib import Path

import torch
from lightning_accumulate import lightning_trainer, model_mean_loss, module_class, quiet

# framework_lm.py and framework_run.py (what most adapters share) are in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import (  # noqa: E402
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    StepCounter,
    build_model,
    record,
    token_losses,
)
from framework_run import EpochData, EpochSampler, make_scheduler  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_scheduler"]
__all__ += ["token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def scheduled_module_class():
    """lightning_accumulate's LightningModule, with a per-step scheduler of the loop's own
    length (Lightning's estimate of the run's optimizer steps)."""

    class Scheduled(module_class()):
        def configure_optimizers(self):
            updates = self.trainer.estimated_stepping_batches
            self.scheduler_length = updates
            scheduler = make_scheduler(self.optimizer, updates)
            return {
                "optimizer": self.optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
            }

    return Scheduled


def fit_parts(module_class, model, optimizer, epochs):
    """What both run adapters of Lightning set up before the fit (this one and
    run_resume_lightning_accumulate.py): quiet loggers, the module, a step counter, and the
    rank's epochs behind one DataLoader. (module, counter, data, loader)."""
    quiet()
    module = module_class(model, optimizer, model_mean_loss)
    data = EpochData(epochs)
    loader = torch.utils.data.DataLoader(data, batch_size=None, sampler=EpochSampler(data))
    return module, StepCounter(optimizer), data, loader


def run_trainer(epochs, accum_steps, root_dir, **settings):
    """lightning_accumulate's pl.Trainer over the whole run: max_epochs = len(epochs)."""
    return lightning_trainer(accum_steps, root_dir, max_epochs=len(epochs), **settings)


def train_loop(model, optimizer, epochs, accum_steps):
    """Lightning's fit over the run: max_epochs = len(epochs) over one DataLoader."""
    module, counter, data, loader = fit_parts(scheduled_module_class(), model, optimizer, epochs)
    with tempfile.TemporaryDirectory(prefix="pcl-lightning-") as out:
        trainer = run_trainer(epochs, accum_steps, out, enable_checkpointing=False)
        trainer.fit(module, train_dataloaders=loader)
    record(
        ADAPTER,
        global_step=trainer.global_step,
        current_epoch=trainer.current_epoch,
        accumulate_grad_batches=trainer.accumulate_grad_batches,
        strategy=type(trainer.strategy).__name__,  # DDPStrategy
        wrapped_in=sorted(module.wrapped_in),  # while training: DistributedDataParallel
        epochs_set=data.epochs_set,  # by Lightning's fit loop, each epoch
        scheduler_length=module.scheduler_length,
        scheduler_steps=trainer.lr_scheduler_configs[0].scheduler.last_epoch,
        optimizer_steps=counter.close(),
        grad_sync=module.grad_sync,  # per microstep: True where DDP all-reduced
    )
