"""The coupled run mode's file contract: a coupled trainer's own loop over epochs (in-batch
negatives, a contrastive loss: the loss of one item depends on the others), judged update by
update against a one-process run whose every update pools every rank's items of its window.

    train_loop(model, optimizer, epochs, accum_steps) -> None   your real loop on one rank, as
                        in the run mode (run_contract): `epochs` is this rank's microbatches,
                        one list per epoch (GLOBAL_BATCH = True: every rank's, by rank), each
                        made by make_microbatch; an epoch's last window may be a tail
    make_microbatch(n, generator) -> dict   required: n items (pairs, samples)
    batch_loss(model, microbatches), or embed(model, microbatch) and
    embedding_loss(model, queries, documents) [, SYMMETRIC]   the objective, as in the
                        coupled mode (coupled_contract): the reference's update of a window
                        is this objective over every rank's items of that window
    ITEMS: int          optional: every microbatch holds ITEMS items (a framework that
                        batches at one size, per_device_train_batch_size); without it the
                        check varies the items from one microstep to the next
    make_scheduler, build_model, make_optimizer, DTYPE, MAX_GRAD_NORM, full_parameters,
    fresh_start, GLOBAL_BATCH   as in the run mode

A file that defines train_loop and a coupled objective (coupled_contract.claims) is checked in
this mode. With a fifth parameter, checkpoint_dir, the loop is resumable, as in the run mode
(run_contract): killed at chosen points and restarted from its own checkpoint (resume.py).
"""

from __future__ import annotations

from types import ModuleType

import pclab.experiments.trainer_check.coupled_contract as coupled_contract
from pclab.experiments.trainer_check.coupled_contract import MAX_ITEMS
from pclab.experiments.trainer_check.run_contract import (
    COUNTS_REFUSED as COUNTS_REFUSED,  # as run's
)
from pclab.experiments.trainer_check.run_contract import RESUMABLE, resumable

SIGNATURES = {  # every function of the contract, as the check calls it
    "build_model": (),
    "batch_loss": ("model", "microbatches"),
    "make_microbatch": ("n", "generator"),
    "embed": ("model", "microbatch"),
    "embedding_loss": ("model", "queries", "documents"),
    "train_loop": ("model", "optimizer", "epochs", "accum_steps"),
    "make_scheduler": ("optimizer", "num_updates"),
    "make_optimizer": ("params",),
    "full_parameters": ("model",),
    "fresh_start": (),
}
MIN_ITEMS = 2  # BatchNorm in training mode needs two values a channel; a pool needs a negative


def signatures_for(module: ModuleType) -> dict[str, tuple[str, ...]]:
    """SIGNATURES, with the resumable train_loop where the file's takes checkpoint_dir."""
    return SIGNATURES | ({"train_loop": RESUMABLE} if resumable(module) else {})


def claims(module: ModuleType) -> bool:
    """The file defines train_loop and is a coupled trainer (batch_loss, or embed and
    embedding_loss without token_losses)."""
    return callable(getattr(module, "train_loop", None)) and coupled_contract.claims(module)


def items(module: ModuleType) -> int | None:
    """ITEMS as the file sets it (None: not set; `problems` checks its value)."""
    value = getattr(module, "ITEMS", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def problems(module: ModuleType) -> list[str]:
    """What a coupled run file lacks, one sentence each (empty: the contract holds)."""
    missing = [
        f"{n}()" for n in ("build_model", "train_loop") if not callable(getattr(module, n, None))
    ]
    found = [f"missing {', '.join(missing)}"] if missing else []
    found += coupled_contract.objective_problems(module)
    given = getattr(module, "ITEMS", None)
    if given is not None and not (items(module) is not None and MIN_ITEMS <= given <= MAX_ITEMS):
        found.append(f"ITEMS={given!r} must be a whole number {MIN_ITEMS}..{MAX_ITEMS}")
    return found
