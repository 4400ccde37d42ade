"""DeepSpeed's own engine as its getting-started guide writes the training loop: for every
microbatch `loss = engine(batch)`, `engine.backward(loss)`, `engine.step()`, with
`gradient_accumulation_steps = K` in the config and the model's own mean loss. The framework's
default. float32 (`DTYPE`): DeepSpeed's CPU accelerator supports float32 and bfloat16 only.

    pclab check examples/frameworks/deepspeed/deepspeed_engine.py --json

`train_step` hands the lab's model and optimizer to `deepspeed.initialize` (ZeRO stage 0, no
clipping, no loss scaling in float32) on the process group the check set up. The engine
divides each loss by K in `backward`, all-reduces the gradients (a mean over the ranks, its own
bucketed all-reduce, no DDP) only on the accumulation boundary, and steps there. Nothing of that
is re-implemented here. The optimizer it is given is the one that steps: DeepSpeed keeps a
client `torch.optim.Optimizer` as its basic optimizer and, in float32 without ZeRO, wraps
nothing around it (`engine.optimizer is optimizer`).

deepspeed is imported inside the functions: only the ranks pay for the import.
"""

import logging
import os
import sys
from pathlib import Path

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

import framework_lm  # noqa: E402
import torch  # noqa: E402
from framework_lm import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, StepCounter, mean_loss, record  # noqa: E402
from framework_lm import token_losses as token_losses  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses"]
__all__ += ["train_step"]
DTYPE = "float32"
ADAPTER = Path(__file__).stem  # names this setting in the record


def build_model() -> torch.nn.Module:
    return framework_lm.build_model().float()


def quiet_deepspeed():
    """Import deepspeed on the CPU accelerator, its logs at errors only."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # else it probes and warns
    import deepspeed
    from deepspeed.utils import logger

    logger.setLevel(logging.ERROR)
    return deepspeed


def engine_config(accum_steps: int, **more) -> dict:
    """The DeepSpeed config of one update: K microbatches of BATCH_SIZE sequences per rank."""
    return {
        "train_micro_batch_size_per_gpu": BATCH_SIZE,
        "gradient_accumulation_steps": accum_steps,
        "gradient_clipping": 0.0,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    } | more


def train_step(model, optimizer, microbatches):
    """One optimizer update by the DeepSpeed engine over this rank's K microbatches."""
    engine_step(model, optimizer, microbatches, ADAPTER, zero_optimization={"stage": 0})


def engine_step(model, optimizer, microbatches, adapter, **settings):
    """The guide's loop over the microbatches with `settings` added to the engine's config;
    its evidence recorded as `adapter`'s."""
    deepspeed = quiet_deepspeed()
    counter = StepCounter(optimizer)
    config = engine_config(len(microbatches), **settings)
    engine, engine_optimizer, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=config
    )
    boundary = []
    for microbatch in microbatches:
        loss = mean_loss(engine(microbatch["input_ids"]), microbatch["labels"])
        boundary.append(engine.is_gradient_accumulation_boundary())  # all-reduce and step here
        engine.backward(loss)
        engine.step()
    record(
        adapter,
        global_steps=engine.global_steps,
        micro_steps=engine.micro_steps,
        gradient_accumulation_steps=engine.gradient_accumulation_steps(),
        wrapped_in=type(engine).__name__,  # DeepSpeedEngine
        zero_stage=engine.zero_optimization_stage(),
        backend=torch.distributed.get_backend(),  # the lab's Gloo group
        accelerator=deepspeed.get_accelerator().device_name(),
        optimizer_is_the_one_passed=engine_optimizer is optimizer,
        optimizer_class=type(engine_optimizer).__name__,
        optimizer_steps=counter.close(),
        grad_sync=boundary,  # per microstep: only the last one all-reduces and steps
    )
