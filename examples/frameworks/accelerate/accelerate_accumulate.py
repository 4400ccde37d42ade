"""Hugging Face Accelerate as its quick tour writes gradient accumulation: a plain
`accelerator.accumulate(model)` loop over the model's own mean loss, the framework's default.

    pclab check examples/frameworks/accelerate/accelerate_accumulate.py --json

`train_step` prepares the lab's model and optimizer with a real `Accelerator`
(gradient_accumulation_steps = K, CPU, the lab's Gloo group: DistributedDataParallel), then runs
the loop every Accelerate guide opens with: forward, `accelerator.backward(loss)`,
`optimizer.step()`, `optimizer.zero_grad()`, each microstep inside `accumulate`. Accelerate
divides each loss by K, skips DDP's all-reduce (no_sync) until the K-th microstep, and steps
the optimizer only there. Nothing of that is re-implemented here.

accelerate is imported inside the functions: only the ranks pay for the import.
"""

import os
import sys
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


def accelerator_for(accum_steps: int):
    """A real Accelerator on the CPU over the process group the check set up (MULTI_CPU)."""
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))  # else it warns
    from accelerate import Accelerator

    return Accelerator(gradient_accumulation_steps=accum_steps, cpu=True)


def evidence(accelerator, model, optimizer, counter: StepCounter, grad_sync: list) -> dict:
    """What shows the update went through Accelerate: its distributed type, the wrappers it
    put on the model and the optimizer, the optimizer's real steps and each microstep's
    DDP gradient sync."""
    return {
        "distributed_type": accelerator.distributed_type.name,  # MULTI_CPU: Gloo
        "gradient_accumulation_steps": accelerator.gradient_accumulation_steps,
        "wrapped_in": type(model).__name__,  # DistributedDataParallel
        "optimizer_wrapped_in": type(optimizer).__name__,  # AcceleratedOptimizer
        "optimizer_steps": counter.close(),
        "grad_sync": grad_sync,  # per microstep: only the last one all-reduces
    }


def train_step(model, optimizer, microbatches):
    """One optimizer update by Accelerate over this rank's K microbatches."""
    accelerator = accelerator_for(len(microbatches))
    counter = StepCounter(optimizer)
    model, optimizer = accelerator.prepare(model, optimizer)
    grad_sync = []
    for microbatch in microbatches:
        with accelerator.accumulate(model):
            loss = mean_loss(model(microbatch["input_ids"]), microbatch["labels"])
            accelerator.backward(loss)
            grad_sync.append(model.require_backward_grad_sync)
            optimizer.step()
            optimizer.zero_grad()
    record(ADAPTER, **evidence(accelerator, model, optimizer, counter, grad_sync))
