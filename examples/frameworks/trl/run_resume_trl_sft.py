"""TRL's `SFTTrainer` over a run, RESUMABLE as transformers' Trainer is (run_resume_hf_trainer.py):
run_trl_sft.py's run (the same `sft_loop`: text it tokenizes itself, its own scheduler and
clipping) with `output_dir=checkpoint_dir`, `save_strategy="steps"`, `save_steps=1` (a
checkpoint-<global_step> folder after every update) and, at start,
`trainer.train(resume_from_checkpoint=get_last_checkpoint(dir))`, as TRL's own scripts pass
`--resume_from_checkpoint` on to `train()`. SFTTrainer adds nothing to the Trainer's resume:
it keeps `_save_checkpoint` and `_load_from_checkpoint` as they are.

    pclab check examples/frameworks/trl/run_resume_trl_sft.py --json

Measured (trl 1.16.0, transformers 5.24.0, accelerate 1.15.0, torch 2.13.0, float32, P = 2,
K = 2; tests/runners/test_resume_frameworks.py pins it): the run is run_trl_sft.py's; the
record shows the Trainer's resume (checkpoint-1, -1, -2, -3 at the four kill points, every
restart ending at global_step 6 with its schedule stepped 6 times), but the check can judge
only `before_tail` (the same run) and says `no_evidence` at the other three. SFTTrainer
tokenizes the text itself and pads a microbatch of several documents its own way, so the
restarted run's first input is none the check handed out and the check cannot tell where the
run came back (counted in order from 1, a first try read each right restart as
`data_replayed` and `data_skipped`); the tail's microbatch, one document, is the check's own
tensor and is placed.

AdamW (`make_optimizer`), as the other resume adapters: its step count shows a lost optimizer
state.

trl is imported inside the functions: only the ranks pay for the import.
"""

import sys
from pathlib import Path

from run_trl_sft import (
    BATCH_SIZE,
    DTYPE,
    GLOBAL_BATCH,
    MAX_GRAD_NORM,
    SEQ_LEN,
    build_model,
    make_microbatch,
    make_scheduler,
    sft_loop,
    token_losses,
)

# run_resume_hf_trainer.py (the Trainer's resume adapter) is in ../hf_trainer/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf_trainer"))

from run_resume_hf_trainer import SAVE_EVERY_UPDATE  # noqa: E402

# framework_run.py (what the run adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_run import make_optimizer  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "GLOBAL_BATCH", "MAX_GRAD_NORM", "SEQ_LEN", "build_model"]
__all__ += ["make_microbatch", "make_optimizer", "make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """SFTTrainer.train() over the run, a checkpoint after every update, resumed from the last."""
    sft_loop(
        model, optimizer, epochs, accum_steps, checkpoint_dir, ADAPTER, True, **SAVE_EVERY_UPDATE
    )
