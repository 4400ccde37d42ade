"""The real Hugging Face `transformers.Trainer` with DeepSpeed ZeRO-2 over a run, RESUMABLE as
the plain Trainer's adapter is (run_resume_hf_trainer.py: `save_strategy="steps"`,
`save_steps=1`, `train(resume_from_checkpoint=get_last_checkpoint(dir))`), with
run_hf_trainer_deepspeed_zero2.py's DeepSpeed config. Under DeepSpeed the Trainer saves and
loads through the engine: `save_checkpoint` into the checkpoint folder, and on resume
`deepspeed_load_checkpoint` (the engine's `load_checkpoint`: module, ZeRO's optimizer
partitions) before the loop; Accelerate, not the engine, cuts the windows.

    pclab check examples/frameworks/deepspeed/run_resume_hf_trainer_deepspeed_zero2.py --json

Measured (transformers 5.24.0, accelerate 1.15.0, deepspeed 0.19.8, torch 2.13.0, float32,
P = 2, K = 2, two epochs of 5 microbatches a rank; tests/runners/test_resume_frameworks.py
pins it): the same run at all four kill points, as the plain Trainer (run_resume_hf_trainer.py):
it saves only after an update, so mid_epoch and mid_window both restart from checkpoint-1 (a
window killed inside runs again from its start), before_tail from checkpoint-2, epoch_boundary
from checkpoint-3. The engine's own microstep counter, which its own checkpoint does not keep
(run_resume_deepspeed_engine.py: counter_reset), changes nothing here: Accelerate sets the
engine's boundary before every backward (accelerate/utils/deepspeed.py:264-278). The run is
run_hf_trainer_deepspeed_zero2.py's (the same update in uneven and equal_counts,
`scheduler_on_skip` in empty_window).

The optimizer is the Trainer's own under DeepSpeed (`deepspeed_init` replaces the one passed),
stated in TrainingArguments as in the run row: `optim="sgd"` at the passed optimizer's rate.
Not AdamW, as the other resume adapters use to show a lost optimizer state: ZeRO-2 keeps
AdamW's moments on its flat fp32 partitions, not keyed by the model's parameters, so the check
cannot read them (measured: every update's `exp_avg` "missing", and a weight solve over
AdamW's non-linear step that named a `gradient_leak` no SGD run shows). So a lost optimizer
state is the one thing this file cannot show; the weights, the schedule, the position in the
data and the window counter it can.

transformers and deepspeed are imported inside the functions: only the ranks pay for them.
"""

import os
from pathlib import Path

from run_hf_trainer_deepspeed_zero2 import (
    BATCH_SIZE,
    DTYPE,
    GLOBAL_BATCH,
    SEQ_LEN,
    VOCAB_SIZE,
    EpochData,
    StepCounter,
    build_model,
    global_rows,
    make_scheduler,
    no_deepspeed_left,
    record,
    token_losses,
    zero2_trainer,
)
from run_resume_hf_trainer import SAVE_EVERY_UPDATE  # ../hf_trainer/, put on the path by it

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE", "GLOBAL_BATCH", "build_model"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """Trainer.train() with ZeRO-2, a checkpoint after every update, resumed from the last."""
    from transformers.trainer_utils import get_last_checkpoint

    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # else deepspeed probes and warns
    last = get_last_checkpoint(checkpoint_dir)  # None: nothing saved yet
    passed = StepCounter(optimizer)
    data = EpochData(global_rows(epochs))
    with no_deepspeed_left():
        trainer = zero2_trainer(
            model, optimizer, data, epochs, accum_steps, checkpoint_dir, **SAVE_EVERY_UPDATE
        )
        trainer.train(resume_from_checkpoint=last)
        engine = trainer.model_wrapped
        record(
            ADAPTER,
            resumed_from=None if last is None else Path(last).name,  # checkpoint-<step>
            global_step=trainer.state.global_step,
            scheduler_steps=trainer.lr_scheduler.last_epoch,
            wrapped_in=type(engine).__name__,  # DeepSpeedEngine
            zero_stage=engine.zero_optimization_stage(),
            optimizer_class=type(engine.basic_optimizer).__name__,
            passed_optimizer_steps=passed.close(),
            epochs_set=data.epochs_set,
        )
