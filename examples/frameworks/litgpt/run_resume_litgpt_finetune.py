"""run_litgpt_finetune.py, RESUMABLE as `litgpt finetune_full` resumes: `--train.save_interval
1` (fit() saves its whole state, the model, the optimizer, the scheduler, `iter_num` and
`step_count`, into `out_dir/step-<n>/lit_model.pth` after every optimizer step, full.py:343-351)
and `--resume auto` (main() loads the latest `step-*` it finds there, full.py:165-168, and fit()
skips the `iter_num` microbatches the run had read, full.py:255-258). The loop, the windows, the
schedule and the data are run_litgpt_finetune.py's; the optimizer is torch's AdamW as the other
resume adapters' (framework_run.make_optimizer), built again by litgpt's
`instantiate_torch_optimizer` with its settings, so a lost optimizer state shows in its step
counts.

    pclab check examples/frameworks/litgpt/run_resume_litgpt_finetune.py --json  # its env
    python -m bench.framework_env litgpt                  # builds it, records its rows

Measured (litgpt 0.5.13, torch 2.13.0, P = 2, K = 2, two epochs of 5 microbatches a rank;
tests/runners/test_litgpt.py pins it): the same run at every kill point. Its straight run
steps at microbatches 2, 4, 6, 8 and 10 (its windows run across the epoch boundary: the
straight run's own finding, run_litgpt_finetune.py); killed at 3 or 4 it comes back at 3, at 5
or 6 at 5: a window killed in its middle runs again from its start, with the weights, AdamW's
state and the schedule it had at the step before.

litgpt is imported inside the functions: only the ranks pay for it.
"""

import sys
from pathlib import Path

from run_litgpt_finetune import (
    BATCH_SIZE,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    litgpt_run,
    make_scheduler,
    token_losses,
)

# framework_run.py (the resume adapters' optimizer) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_run import make_optimizer  # noqa: E402

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "make_optimizer"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """litgpt's fit(), saving after every step into checkpoint_dir and resuming from the
    latest checkpoint it finds there."""
    litgpt_run(model, optimizer, epochs, accum_steps, ADAPTER, checkpoint_dir)
