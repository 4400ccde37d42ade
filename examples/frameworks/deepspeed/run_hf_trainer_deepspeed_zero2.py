"""The real Hugging Face `transformers.Trainer` with DeepSpeed ZeRO-2 over a run:
run_hf_trainer.py's `train()` (gradient_accumulation_steps = K, num_train_epochs =
len(epochs), Trainer's own linear schedule, the model's own loss) with
hf_trainer_deepspeed_zero2.py's DeepSpeed config (`zero_optimization.stage = 2`, the rest
"auto"), float32 (DeepSpeed's CPU accelerator takes float32 and bfloat16 only). Trainer and
Accelerate cut the windows; nothing here decides where one ends.

    pclab check examples/frameworks/deepspeed/run_hf_trainer_deepspeed_zero2.py --json

Measured (transformers 5.24.0, accelerate 1.15.0, deepspeed 0.19.8, torch 2.13.0, P = 2,
K = 2, two epochs of 5 microbatches a rank: windows 2, 2 and a tail of 1): the plain
Trainer's row, unchanged by ZeRO-2: the same update in uneven and equal_counts (to 1.2e-7
in float32, the tolerance 1.8e-6), `scheduler_on_skip` in empty_window, 3 + 3 steps;
tests/runners/test_run_frameworks.py pins it. In site-packages (those versions):

- The window is Accelerate's, not the engine's: DeepSpeed's own engine ends a window by its
  run-long microstep counter (run_deepspeed_engine.py: the tail never steps), but under
  Trainer, Accelerate's `DeepSpeedEngineWrapper.backward` sets the engine's boundary from its
  own `sync_gradients` (accelerate/utils/deepspeed.py:264-278, `set_gradient_accumulation_
  boundary`, :267) and calls `engine.step()` only there; Trainer syncs at each epoch's end
  (trainer.py:1897), so every tail is a window of its own and steps.
- The scale: the loss is divided by the window's global label count (num_items_in_batch, as
  without DeepSpeed), and Trainer passes `scale_wrt_gas=False` (trainer.py:2121-2124,
  transformers PR #35808) so the engine does not divide it by K again.
- The optimizer and the scheduler: `deepspeed_init` (trainer.py:1729) replaces both by
  Trainer's own from TrainingArguments, as in the one-update row (hf_trainer_deepspeed_
  zero2.py), so this adapter states the passed optimizer's rule there (`optim="sgd"`, its
  learning rate). ZeRO-2 steps that optimizer one parameter group at a time on its fp32
  partitions and copies each back, then gathers them (deepspeed/runtime/zero/
  stage_1_and_2.py:3139-3155): the check records one update per window, read once copied
  back (run_observe.Observer's foreign optimizer).
- A window with no label (N = 0) still steps, with Trainer's schedule, as without DeepSpeed.

Every rank records ($PCL_FRAMEWORK_RECORD) Trainer's step count and label counts, the engine,
its ZeRO stage, the optimizer that stepped, and that the one passed in never did.

transformers and deepspeed are imported inside the functions: only the ranks pay for them.
"""

import os
import sys
import tempfile
from pathlib import Path

# the neighbours of other folders: run_hf_trainer.py and hf_trainer.py (Trainer's adapters)
# in ../hf_trainer/, framework_run.py and framework_lm.py in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf_trainer"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import StepCounter, record  # noqa: E402
from framework_run import EpochData, global_rows  # noqa: E402
from hf_trainer import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, token_losses  # noqa: E402
from hf_trainer_deepspeed_zero2 import DTYPE, ZERO_2, build_model, no_deepspeed_left  # noqa: E402
from run_hf_trainer import make_scheduler, trainer_for  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE", "GLOBAL_BATCH", "build_model"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]
GLOBAL_BATCH = True  # every rank's epochs: Trainer's prepared DataLoader shards them
ADAPTER = Path(__file__).stem  # names this setting in the record
OPTIM = {"SGD": "sgd", "AdamW": "adamw_torch"}  # the passed optimizer -> TrainingArguments.optim


def train_loop(model, optimizer, epochs, accum_steps):
    """Trainer.train() with ZeRO-2 over the run; the passed optimizer's rule stated in
    TrainingArguments for the one Trainer builds instead."""
    zero2_run(model, optimizer, epochs, accum_steps, ADAPTER)


def zero2_run(model, optimizer, epochs, accum_steps, adapter):
    """The run (run_hf_trainer_deepspeed_zero2_adamw.py's too): `adapter` names its record."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # else deepspeed probes and warns
    passed = StepCounter(optimizer)
    data = EpochData(global_rows(epochs))
    with no_deepspeed_left(), tempfile.TemporaryDirectory(prefix="pcl-hf-zero2-") as out:
        trainer = zero2_trainer(model, optimizer, data, epochs, accum_steps, out)
        trainer.train()
        _record(trainer, optimizer, passed, data, adapter)


def zero2_trainer(model, optimizer, data, epochs, accum_steps, output_dir, **saving):
    """run_hf_trainer.py's Trainer with ZeRO-2 (and run_resume_hf_trainer_deepspeed_zero2.py's,
    with its `saving` arguments): the passed optimizer's rule (SGD, or AdamW without weight
    decay: TrainingArguments' defaults are torch's), stated for the one the Trainer builds."""
    (group,) = optimizer.param_groups
    optim = OPTIM.get(type(optimizer).__name__)
    if optim is None or group.get("weight_decay", 0.0) or group.get("momentum", 0.0):
        raise ValueError(f"optimizer={optimizer!r}: plain SGD or AdamW(weight_decay=0) only")
    return trainer_for(
        model,
        optimizer,
        data,
        epochs,
        accum_steps,
        output_dir,
        deepspeed=dict(ZERO_2),
        optim=optim,
        learning_rate=group["lr"],
        **saving,
    )


def _record(trainer, optimizer, passed: StepCounter, data: EpochData, adapter: str) -> None:
    """This rank's evidence of the run (read before no_deepspeed_left clears the state)."""
    engine = trainer.model_wrapped
    record(
        adapter,
        global_step=trainer.state.global_step,
        max_steps=trainer.state.max_steps,
        distributed_type=trainer.accelerator.distributed_type.name,  # DEEPSPEED
        wrapped_in=type(engine).__name__,  # DeepSpeedEngine
        zero_stage=engine.zero_optimization_stage(),
        optimizer_wrapped_in=type(engine.optimizer).__name__,  # DeepSpeedZeroOptimizer
        optimizer_class=type(engine.basic_optimizer).__name__,
        optimizer_is_the_one_passed=engine.basic_optimizer is optimizer,
        passed_optimizer_steps=passed.close(),
        num_items_in_batch=trainer.counted,
        epochs_set=data.epochs_set,
    )
