"""PyTorch Lightning as its docs write gradient accumulation: `Trainer(accumulate_grad_batches=K)`
with a LightningModule whose training_step returns the model's own mean loss, strategy="ddp"
on the CPU. The framework's default.

    pclab check examples/frameworks/lightning/lightning_accumulate.py --json

`train_step` wraps the lab's model in a LightningModule whose `configure_optimizers` returns the
lab's optimizer, and fits a real `lightning.pytorch.Trainer` for one optimizer step
(max_steps=1) over this rank's K microbatches. Lightning joins the process group the check set
up (it initialises none when one exists), wraps the model in DistributedDataParallel, divides
each returned loss by K, blocks DDP's all-reduce until the K-th microstep and steps there.
Nothing of that is re-implemented here. `use_distributed_sampler=False` only keeps Lightning
from splitting the rank's own microbatches across the processes a second time.

lightning is imported inside the functions: only the ranks pay for the import.
"""

import logging
import os
import sys
import tempfile
from pathlib import Path

import torch

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import (  # noqa: E402
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    StepCounter,
    build_model,
    mean_loss,
    record,
    token_losses,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def module_class():
    """The LightningModule, built on first use (so importing this file imports no lightning).
    `loss(batch)` is the setting: what training_step returns for one microbatch."""
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self, model, optimizer, loss):
            super().__init__()
            self.model, self.optimizer, self.loss = model, optimizer, loss
            self.grad_sync, self.wrapped_in = [], set()

        def training_step(self, batch, batch_idx):
            return self.loss(self, batch)

        def on_after_backward(self):
            # DDP all-reduces in this backward only when Lightning let it
            wrapper = self.trainer.strategy.model
            self.grad_sync.append(wrapper.require_backward_grad_sync)
            self.wrapped_in.add(type(wrapper).__name__)

        def configure_optimizers(self):
            return self.optimizer

    return Module


def quiet() -> None:
    """Lightning's loggers to errors only, and torch's thread count kept (once a process)."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))


def lightning_trainer(accum_steps: int, root_dir: str, **settings):
    """The pl.Trainer every Lightning adapter fits with (this one, run_lightning_accumulate.py
    and its resume adapter): DDP on CPU over every rank, accumulate_grad_batches = K, quiet;
    `settings` say how long it runs and what it saves."""
    import lightning.pytorch as pl
    import torch.distributed as dist

    return pl.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=dist.get_world_size(),  # one node: every rank is a local process
        num_nodes=1,
        accumulate_grad_batches=accum_steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,  # the rank's own microbatches, no second split
        num_sanity_val_steps=0,
        default_root_dir=root_dir,
        **settings,
    )


def fit_one_step(model, optimizer, microbatches, loss, adapter: str) -> None:
    """Fit a Lightning Trainer for exactly one optimizer step over the rank's microbatches."""
    quiet()
    module = module_class()(model, optimizer, loss)
    counter = StepCounter(optimizer)
    with tempfile.TemporaryDirectory(prefix="pcl-lightning-") as out:
        trainer = lightning_trainer(len(microbatches), out, max_steps=1, enable_checkpointing=False)
        data = torch.utils.data.DataLoader(microbatches, batch_size=None, shuffle=False)
        trainer.fit(module, train_dataloaders=data)
    record(
        adapter,
        global_step=trainer.global_step,
        accumulate_grad_batches=trainer.accumulate_grad_batches,
        strategy=type(trainer.strategy).__name__,  # DDPStrategy
        cluster_environment=type(trainer.strategy.cluster_environment).__name__,
        wrapped_in=sorted(module.wrapped_in),  # while training: DistributedDataParallel
        optimizer_steps=counter.close(),
        grad_sync=module.grad_sync,  # per microstep: only the last one all-reduces
    )


def model_mean_loss(module, batch):
    return mean_loss(module.model(batch["input_ids"]), batch["labels"])


def train_step(model, optimizer, microbatches):
    """One optimizer update by Lightning over this rank's K microbatches."""
    fit_one_step(model, optimizer, microbatches, model_mean_loss, ADAPTER)
