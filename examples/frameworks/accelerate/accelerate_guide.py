"""Hugging Face Accelerate, the pattern its gradient-accumulation guide recommends for samples
of variable size ("Gradient accumulation on training samples of variable size"): count the
targets of the rank's K microbatches, gather the count over the processes (N), sum each
microbatch's loss and scale it by K * P / N, since `accelerator.backward` divides by K and DDP
averages over P; all-reduce on the last microstep only (`model.no_sync` before it).

    pclab check examples/frameworks/accelerate/accelerate_guide.py --json

The count follows the guide's text: for a causal LM that shifts its labels, count
`labels[..., 1:]`, the labels that are terms. The guide's code counts every label
(`batch["labels"].ne(-100)`); accelerate_guide_as_written.py runs that.
"""

import contextlib
import sys
from pathlib import Path

from accelerate_accumulate import accelerator_for, evidence

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import (  # noqa: E402
    BATCH_SIZE,
    IGNORE,
    SEQ_LEN,
    VOCAB_SIZE,
    StepCounter,
    build_model,
    record,
    shifted_losses,
    token_losses,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def terms_after_shift(batch):
    return (batch["labels"][..., 1:] != IGNORE).sum()


def guide_step(model, optimizer, batch_samples, count, adapter: str) -> None:
    """The guide's skeleton for one update; `count(batch)` is its num_items_in_batch rule."""
    accelerator = accelerator_for(len(batch_samples))
    gradient_accumulation_steps = accelerator.gradient_accumulation_steps
    counter = StepCounter(optimizer)
    model, optimizer = accelerator.prepare(model, optimizer)
    num_items_in_batch = sum([count(batch) for batch in batch_samples])
    num_items_in_batch = accelerator.gather(num_items_in_batch).sum().item()
    grad_sync = []
    for i, batch in enumerate(batch_samples):
        if i < len(batch_samples) - 1 and accelerator.num_processes > 1:
            ctx = model.no_sync
        else:
            ctx = contextlib.nullcontext
        with ctx():
            outputs = model(batch["input_ids"])
            loss = shifted_losses(outputs, batch["labels"]).sum()  # sums, as the guide says
            loss = (loss * gradient_accumulation_steps * accelerator.num_processes) / (
                num_items_in_batch
            )
            accelerator.backward(loss)
            grad_sync.append(model.require_backward_grad_sync)
    optimizer.step()
    optimizer.zero_grad()
    found = evidence(accelerator, model, optimizer, counter, grad_sync)
    record(adapter, num_items_in_batch=num_items_in_batch, **found)


def train_step(model, optimizer, microbatches):
    guide_step(model, optimizer, microbatches, terms_after_shift, ADAPTER)
