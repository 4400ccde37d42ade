"""PyTorch Lightning giving every label the same weight: how a Lightning user gets the global
token mean with `accumulate_grad_batches=K` and strategy="ddp", which Lightning does not do by
itself (Lightning-AI/pytorch-lightning#20350).

    pclab check examples/frameworks/lightning/lightning_global_tokens.py --json

Lightning divides what training_step returns by K and DDP averages over P, and training_step
sees one microbatch. So the data pipeline stamps every microbatch with its rank's label count
over the accumulation window (the K microbatches of one update, counted after the causal
shift), training_step sums that count over the ranks with Lightning's own
`strategy.reduce(..., reduce_op="sum")` (N) and returns the summed loss times K * P / N.
Everything else is lightning_accumulate.py's: the same Trainer, one optimizer step.

With no label anywhere (N = 0) the loss is multiplied by 0, not divided by it: Lightning's DDP
cannot skip a training_step (returning None raises), so it steps on zero gradients.
"""

import sys
from pathlib import Path

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import (  # noqa: E402
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    count_terms,
    shifted_losses,
    token_losses,
)
from lightning_accumulate import fit_one_step  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record
WINDOW_COUNT = "num_items_in_window"  # the key the data pipeline adds to each microbatch


def stamped(microbatches):
    """The data pipeline's part: every microbatch carries the rank's count over the window."""
    import torch

    count = torch.tensor(float(count_terms(microbatches)))
    return [mb | {WINDOW_COUNT: count} for mb in microbatches]


def global_token_loss(module, batch):
    trainer = module.trainer
    n = trainer.strategy.reduce(batch[WINDOW_COUNT].clone(), reduce_op="sum")  # N
    summed = shifted_losses(module.model(batch["input_ids"]), batch["labels"]).sum()
    scale = trainer.accumulate_grad_batches * trainer.world_size / n if n > 0 else 0.0
    return summed * scale


def train_step(model, optimizer, microbatches):
    fit_one_step(model, optimizer, stamped(microbatches), global_token_loss, ADAPTER)
