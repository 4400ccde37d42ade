"""The run mode's file contract: the trainer's own loop over epochs, judged update by update
against a one-process run (the seed's protocol step 4: the optimizer, the scheduler and the
counters advance as agreed, the gradients are cleared; and its "incomplete tail window").

    train_loop(model, optimizer, epochs, accum_steps[, checkpoint_dir]) -> None   your real
                        loop on one rank:
                        `epochs` is this rank's microbatches, one list per epoch, in order
                        (GLOBAL_BATCH = True: per epoch, every rank's list, by rank); an
                        epoch's length need not be a multiple of accum_steps (its last window
                        is then a tail). Windowing, normalisation, averaging, clipping,
                        optimizer.step(), zero_grad and the scheduler are the loop's own
    make_scheduler(optimizer, num_updates)   optional: the intended schedule, stepped once
                        per update by the reference; the loop may call it itself
    build_model, token_losses, make_microbatch, make_optimizer, DTYPE, MAX_GRAD_NORM,
    full_parameters, fresh_start, VOCAB_SIZE, SEQ_LEN, BATCH_SIZE   as in the token mode

With a fifth parameter, checkpoint_dir, the loop is resumable: it saves its own state there as
its real version does and, finding a checkpoint there at start, resumes from it (the check
then also kills it at chosen points and restarts it: resume.py). How often it saves is its
own: a restart that runs the updates after its last checkpoint again is still the same run.

A file that defines train_loop is checked in the run mode (it may define train_step too:
train_loop wins). The check observes every optimizer step through torch's global optimizer
hooks and counts the model's forward calls (one per microbatch), asking the file for nothing
more.
"""

from __future__ import annotations

from types import ModuleType

REQUIRED_FUNCTIONS = ("build_model", "token_losses", "train_loop")
SIGNATURES = {  # every function of the contract, as the check calls it
    "build_model": (),
    "token_losses": ("model", "microbatch"),
    "train_loop": ("model", "optimizer", "epochs", "accum_steps"),
    "make_scheduler": ("optimizer", "num_updates"),
    "make_optimizer": ("params",),
    "make_microbatch": ("n_terms", "generator"),
    "full_parameters": ("model",),
    "fresh_start": (),
}

# A whole run's scenarios are the check's own epochs (run_scenarios.py): --counts gives one
# update's, and a file of a run mode refuses it before anything is launched (cli.py).
COUNTS_REFUSED = (
    "--counts gives one update's counts: a train_loop file is checked over its own epochs; "
    "leave --counts out"
)


RESUMABLE = ("model", "optimizer", "epochs", "accum_steps", "checkpoint_dir")


def resumable(module: ModuleType) -> bool:
    """train_loop takes checkpoint_dir: five positional parameters."""
    import inspect

    try:
        parameters = inspect.signature(module.train_loop).parameters
    except (TypeError, ValueError):
        return False
    return len(parameters) == len(RESUMABLE)


def signatures_for(module: ModuleType) -> dict[str, tuple[str, ...]]:
    """SIGNATURES, with the resumable train_loop where the file's takes checkpoint_dir."""
    return SIGNATURES | ({"train_loop": RESUMABLE} if resumable(module) else {})


def claims(module: ModuleType) -> bool:
    """The file defines train_loop."""
    return callable(getattr(module, "train_loop", None))


def problems(module: ModuleType) -> list[str]:
    """What a run-mode file lacks, in one sentence (empty: the contract holds)."""
    missing = [f for f in REQUIRED_FUNCTIONS if not callable(getattr(module, f, None))]
    return [f"missing {', '.join(f'{m}()' for m in missing)}"] if missing else []
