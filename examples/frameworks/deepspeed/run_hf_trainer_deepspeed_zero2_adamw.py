"""run_hf_trainer_deepspeed_zero2.py with AdamW: the Trainer builds `optim="adamw_torch"` at
this file's rate (weight decay 0), which ZeRO-2 steps on its flat fp32 partitions.

    pclab check examples/frameworks/deepspeed/run_hf_trainer_deepspeed_zero2_adamw.py --json

What it shows is the check's, not the Trainer's: ZeRO-2 keeps AdamW's moments and step counts
keyed by its flat partitions, none of the model's parameters, so the check cannot read them
and compares each update on the parameters alone (the scenario's note
`optimizer_state_unread`). Before it did, every update of this file diverged at once on a
"missing" `exp_avg`: a `different` that was the check's, not the loop's.

Measured (transformers 5.24.0, accelerate 1.15.0, deepspeed 0.19.8, torch 2.13.0, float32,
P = 2, K = 2, two epochs of 5 microbatches a rank; tests/runners/test_run_frameworks.py pins
it): the plain ZeRO-2 row's verdicts, the same update in uneven and equal_counts (every window
`global_token`, max |delta| 6.0e-8 against float32's tolerance 7.2e-6 for AdamW's steps),
`scheduler_on_skip` in empty_window, each scenario noting `optimizer_state_unread`. AdamW's
own state, lost or not, is what this comparison cannot show.

transformers and deepspeed are imported inside the functions: only the ranks pay for them.
"""

from pathlib import Path

import torch
from run_hf_trainer_deepspeed_zero2 import (
    BATCH_SIZE,
    DTYPE,
    GLOBAL_BATCH,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    make_scheduler,
    token_losses,
    zero2_run,
)

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE", "GLOBAL_BATCH", "build_model"]
__all__ += ["make_optimizer", "make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def make_optimizer(params):
    """AdamW as the Trainer builds it here (`adamw_torch`, TrainingArguments' betas and eps,
    which are torch's defaults; weight decay 0)."""
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.0)


def train_loop(model, optimizer, epochs, accum_steps):
    """run_hf_trainer_deepspeed_zero2.py's run, AdamW stated for the Trainer's optimizer."""
    zero2_run(model, optimizer, epochs, accum_steps, ADAPTER)
