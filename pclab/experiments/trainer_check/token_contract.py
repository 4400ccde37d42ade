"""The token mode's file contract: a trainer whose objective is a mean over per-label losses
(trainer_file's docstring gives the whole contract; this is what reads the mode from a file).

    build_model() -> torch.nn.Module                 required
    token_losses(model, microbatch) -> Tensor        required: one loss per counted label
    train_step(model, optimizer, microbatches)       required
    make_optimizer, make_microbatch, full_parameters, fresh_start   optional

The token mode claims every file no other mode claims (modes.MODES lists it last), so a file
lacking its functions is told what the token mode needs.
"""

from __future__ import annotations

from types import ModuleType

REQUIRED_FUNCTIONS = ("build_model", "token_losses", "train_step")
SIGNATURES = {  # every function of the contract, as the check calls it
    "build_model": (),
    "token_losses": ("model", "microbatch"),
    "train_step": ("model", "optimizer", "microbatches"),
    "make_optimizer": ("params",),
    "make_microbatch": ("n_terms", "generator"),
    "full_parameters": ("model",),
    "fresh_start": (),
}


def claims(module: ModuleType) -> bool:
    """Every file: the mode of a file no other mode claims."""
    return True


def problems(module: ModuleType) -> list[str]:
    """What a token file lacks, in one sentence (empty: the contract holds)."""
    missing = [f for f in REQUIRED_FUNCTIONS if not callable(getattr(module, f, None))]
    return [f"missing {', '.join(f'{m}()' for m in missing)}"] if missing else []
