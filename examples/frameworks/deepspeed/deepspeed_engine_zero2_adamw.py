"""deepspeed_engine.py's loop (the getting-started guide's) with ZeRO stage 2 and AdamW: the
engine partitions the optimizer passed in over the ranks and steps it on its own flat fp32
copies of the parameters. torch's AdamW is no optimizer ZeRO lists as tested, so the config
says `zero_allow_untested_optimizer` (without it `deepspeed.initialize` refuses it).

    pclab check examples/frameworks/deepspeed/deepspeed_engine_zero2_adamw.py --json

What it shows is the loop's normalisation, as deepspeed_engine.py's (the model's mean loss
per microbatch, ÷ K by the engine, a mean over the ranks), and what the check can and cannot
read of a ZeRO optimizer: after `initialize` the AdamW passed in holds ZeRO's partitions, not
the model's parameters (stage_1_and_2.py replaces each group's params with its partition), so
its moments and step count are keyed by none of the model's names. The check then compares
each update on the parameters alone and notes `optimizer_state_unread`; at N = 0, where the
engine still steps AdamW, unchanged parameters cannot show that nothing else changed, so that
scenario is `no_evidence`, not a pass (the same loop at stage 0 with this AdamW, whose state
the check reads, fails there on AdamW's step count: `extra_optimizer_state`, measured).

deepspeed is imported inside the functions: only the ranks pay for the import.
"""

from pathlib import Path

import torch
from deepspeed_engine import (
    BATCH_SIZE,
    DTYPE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    engine_step,
    token_losses,
)

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record
ZERO_2 = {"zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True}


def make_optimizer(params):
    """torch's AdamW, weight decay 0: a stateful optimizer whose state ZeRO partitions."""
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.0)


def train_step(model, optimizer, microbatches):
    """One update by the DeepSpeed engine with ZeRO-2 over this rank's K microbatches."""
    engine_step(model, optimizer, microbatches, ADAPTER, **ZERO_2)
