"""The real Hugging Face `transformers.Trainer` with DeepSpeed ZeRO-2 (`TrainingArguments(
deepspeed={"zero_optimization": {"stage": 2}, ... "auto"})`), the lab's optimizer handed in
through `optimizers=` as hf_trainer.py does; float32 (`DTYPE`): DeepSpeed's CPU accelerator
supports float32 and bfloat16 only. Everything else is hf_trainer.py's (its Llama model, its
Trainer, `average_tokens_across_devices=True`).

    pclab check examples/frameworks/deepspeed/hf_trainer_deepspeed_zero2.py --json

**What becomes of the optimizer passed in:** nothing. With DeepSpeed on, `Trainer.train()`
calls `deepspeed_init`, which sets `trainer.optimizer = None` and builds Trainer's own from
`TrainingArguments` (`create_optimizer`: `optim`, `learning_rate`, `weight_decay`; AdamW at
5e-5 by default) for DeepSpeed to wrap in its ZeRO-2 optimizer; the scheduler passed in goes
the same way. No error, no warning. So this adapter also states the passed optimizer's rule in
`TrainingArguments` (`optim="sgd"`, its learning rate, no momentum or weight decay): the
optimizer that steps is then Trainer's own with the same rule, the check compares the
parameters alone (`optimizer_not_stepped`), and what it measures is the normalisation.

Every rank records ($PCL_FRAMEWORK_RECORD) Trainer's step count and label counts, the engine
and its ZeRO stage, the optimizer that stepped and how often, and that the one passed in
never did.
"""

import contextlib
import os
import sys
from pathlib import Path

# the neighbours of other folders: hf_trainer.py (the Trainer adapter) in ../hf_trainer/,
# framework_lm.py (the model and evidence most adapters share) in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf_trainer"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

import hf_trainer  # noqa: E402
import torch  # noqa: E402
from framework_lm import StepCounter, record  # noqa: E402
from hf_trainer import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE  # noqa: E402
from hf_trainer import token_losses as token_losses  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses"]
__all__ += ["train_step"]
DTYPE = "float32"
ADAPTER = Path(__file__).stem  # names this setting in the record
ZERO_2 = {  # the config Trainer's DeepSpeed docs start from: "auto" filled from the arguments
    "zero_optimization": {"stage": 2},
    "train_micro_batch_size_per_gpu": "auto",
    "train_batch_size": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 10**9,
}


USE_DEEPSPEED = "ACCELERATE_USE_DEEPSPEED"  # what Accelerate leaves set: no_deepspeed_left


@contextlib.contextmanager
def no_deepspeed_left():
    """Leave the process as the Trainer found it. An Accelerator made with a DeepSpeed plugin
    sets ACCELERATE_USE_DEEPSPEED=true in the environment and leaves it (accelerate/
    accelerator.py:368), and Accelerate's state is one per process (accelerate/state.py):
    every later Trainer of the process then makes a DeepSpeed plugin of its own (transformers/
    training_args.py:1716) and every later Accelerator a DeepSpeed engine (state.py:974).
    Measured: the files checked after run_hf_trainer_deepspeed_zero2.py in the same launch,
    TRL's SFTTrainer and transformers' run_clm_no_trainer.py loop, no longer got their own
    verdicts (one trained under DeepSpeed with Trainer's default optimizer, the other raised).
    Cleared as Accelerate's and transformers' own tests clear them between cases
    (`_reset_state`, private; `unset_hf_deepspeed_config`); torch's process group stays."""
    from accelerate.state import AcceleratorState
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    before = os.environ.get(USE_DEEPSPEED)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(USE_DEEPSPEED, None)
        else:
            os.environ[USE_DEEPSPEED] = before
        AcceleratorState._reset_state(reset_partial_state=True)
        unset_hf_deepspeed_config()


def build_model() -> torch.nn.Module:
    return hf_trainer.build_model().float()


def observing():
    """A Trainer subclass that only counts the steps of the optimizer Trainer builds itself."""
    import os

    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # else deepspeed probes and warns
    from transformers import Trainer

    class Observed(Trainer):
        def create_optimizer(self, model=None):
            built = self.optimizer is None
            optimizer = super().create_optimizer(model)
            if built:
                self.own_steps = StepCounter(optimizer)
            return optimizer

    return Observed


def train_step(model, optimizer, microbatches):
    """One optimizer update by Trainer + DeepSpeed ZeRO-2 over this rank's K microbatches."""
    with no_deepspeed_left():
        passed = StepCounter(optimizer)
        (group,) = optimizer.param_groups
        trainer = hf_trainer.run_trainer(
            model,
            optimizer,
            microbatches,
            trainer_class=observing(),
            deepspeed=dict(ZERO_2),
            optim="sgd",  # the passed optimizer's rule, for the one Trainer builds instead
            learning_rate=group["lr"],
        )
        engine = trainer.model_wrapped
        built = engine.basic_optimizer
        record(
            ADAPTER,
            global_step=trainer.state.global_step,
            gradient_accumulation_steps=trainer.args.gradient_accumulation_steps,
            distributed_type=trainer.accelerator.distributed_type.name,  # DEEPSPEED
            wrapped_in=type(engine).__name__,  # DeepSpeedEngine
            zero_stage=engine.zero_optimization_stage(),
            optimizer_wrapped_in=type(engine.optimizer).__name__,  # DeepSpeedZeroOptimizer
            optimizer_class=type(built).__name__,
            optimizer_lr=built.param_groups[0]["lr"],
            optimizer_is_the_one_passed=built is optimizer,
            optimizer_param_groups=len(built.param_groups),  # Trainer's: with and without decay
            optimizer_steps=trainer.own_steps.close(),  # ZeRO steps it once per parameter group
            passed_optimizer_steps=passed.close(),
            num_items_in_batch=trainer.counted,
        )
