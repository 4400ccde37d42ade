"""run_olmo_core_trainer.py, RESUMABLE as OLMo-core runs are: its own `CheckpointerCallback`
saves a checkpoint after every step (`save_interval=1`, synchronously) into the Trainer's
save folder, and a Trainer that finds one there at `fit()` loads it (its default
`load_strategy=if_available`): the train module's model and optimizer state, and the Trainer's
own (its step, its epoch, the data loader's position). The loop, the loader, the schedule and
the data are run_olmo_core_trainer.py's; the optimizer is torch's AdamW as the other resume
adapters' (framework_run.make_optimizer), built again by OLMo-core's AdamWConfig with every
hyperparameter of the one handed in, so a lost optimizer state shows in its step counts.

    pclab check examples/frameworks/olmo_core/run_resume_olmo_core_trainer.py --json  # its env
    python -m bench.framework_env ai2-olmo-core      # builds it, records its rows

Measured (ai2-olmo-core 3.0.0, torch 2.13.0, P = 2, K = 2; tests/runners/test_olmo_core.py
pins it): the same run at mid_epoch, mid_window and epoch_boundary (back at microbatch 3, 3 and
6: after the last step saved); not killed at before_tail, whose microbatch the loader never
serves. The Trainer runs a mock batch before the first real one (`_dry_run_batch`); the check
places a restart by the first input it handed out. Checkpointing itself changes the run: the
pre-train checkpoint makes the fresh AdamW's state through torch.distributed.checkpoint's
`_init_optim_state`, a step at lr 0, so the run takes 5 optimizer steps for 4 updates and
AdamW's step counts run one ahead (pytorch/torchtitan#4382).

ai2-olmo-core is imported inside the functions: only the ranks pay for it.
"""

import sys
from pathlib import Path

from run_olmo_core_trainer import (
    BATCH_SIZE,
    DTYPE,
    FIRST_POSITION_LABELLED,
    GLOBAL_BATCH,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    full_parameters,
    make_microbatch,
    make_scheduler,
    olmo_run,
    token_losses,
)

# framework_run.py (the resume adapters' optimizer) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_run import make_optimizer  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "FIRST_POSITION_LABELLED", "GLOBAL_BATCH", "SEQ_LEN"]
__all__ += ["VOCAB_SIZE", "build_model", "full_parameters", "make_microbatch", "make_optimizer"]
__all__ += ["make_scheduler", "token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """OLMo-core's Trainer.fit(), saving after every step into checkpoint_dir and resuming
    from the latest checkpoint it finds there."""
    olmo_run(model, optimizer, epochs, accum_steps, ADAPTER, checkpoint_dir)
