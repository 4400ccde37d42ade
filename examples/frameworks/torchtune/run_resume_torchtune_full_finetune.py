"""run_torchtune_full_finetune.py, RESUMABLE as torchtune's recipe resumes: the recipe's own
checkpoint at every epoch's end (the model under `output_dir/epoch_{e}/`, the optimizer and
`epochs_run` in `recipe_state/recipe_state.pt`; it has no mid-epoch checkpoint), and a launch
that finds one sets what torchtune's docs say to set for a resume: `resume_from_checkpoint:
True` and `checkpoint_files` the latest epoch's model file. The loop, the windows, the
schedule and the data are run_torchtune_full_finetune.py's; the optimizer is torch's AdamW as
the other resume adapters' (framework_run.make_optimizer), built by the recipe from its config
with every hyperparameter of the one handed in, so a lost optimizer state shows in its step
counts.

    pclab check examples/frameworks/torchtune/run_resume_torchtune_full_finetune.py --json
    python -m bench.framework_env torchtune               # builds its env, records its rows

Measured (torchtune 0.6.1, torchao 0.15.0, torch 2.13.0, P = 2, K = 2, two epochs of 5
microbatches a rank): see tests/runners/test_torchtune.py, which pins it and the record.

torchtune is imported inside the functions: only the ranks pay for it.
"""

import sys
from pathlib import Path

from run_torchtune_full_finetune import (
    BATCH_SIZE,
    DTYPE,
    FIRST_POSITION_LABELLED,
    SEQ_LEN,
    VOCAB_SIZE,
    build_model,
    full_parameters,
    make_scheduler,
    token_losses,
    tune_run,
)

# framework_run.py (the resume adapters' optimizer) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_run import make_optimizer  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "FIRST_POSITION_LABELLED", "SEQ_LEN", "VOCAB_SIZE"]
__all__ += ["build_model", "full_parameters", "make_optimizer", "make_scheduler"]
__all__ += ["token_losses", "train_loop"]
ADAPTER = Path(__file__).stem  # names this setting in the record


def train_loop(model, optimizer, epochs, accum_steps, checkpoint_dir):
    """The recipe's train(), its epoch-end checkpoints written into checkpoint_dir and resumed
    from the latest one found there."""
    tune_run(model, optimizer, epochs, accum_steps, ADAPTER, checkpoint_dir, **settings(optimizer))


def settings(optimizer) -> dict:
    """Every hyperparameter of the optimizer handed in (AdamW, or the check's SGD replays)
    its class takes, besides the rate the recipe's config already states; tuples as lists,
    as a YAML config holds them."""
    import inspect

    (group,) = optimizer.param_groups
    takes = inspect.signature(type(optimizer)).parameters
    return {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in group.items()
        if k in takes and k not in ("params", "lr")
    }
