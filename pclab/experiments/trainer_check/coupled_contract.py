"""The coupled mode's file contract: a trainer whose loss of one item depends on the others
(in-batch negatives, BatchNorm statistics), so no loss per label exists (issue 28).

The mode is read from the file through `claims` (modes.of_module, once, in trainer_file.load): a
file that defines `batch_loss`, or `embedding_loss` without `token_losses`, is checked in the
coupled mode.

    batch_loss(model, microbatches) -> Tensor   the objective of one update over the
                                     microbatches given, in ONE process (no collective)
    make_microbatch(n, generator) -> dict       required: n items (pairs, samples)
    embed(model, microbatch) -> (queries, documents)   optional, with embedding_loss: one
                                     row per item, document i the positive of query i
    embedding_loss(model, queries, documents) -> Tensor   optional: a scalar over the rows
                                     given (batch_loss may then be left out)
    SYMMETRIC: bool = False          optional, with embed and embedding_loss: True and
                                     embedding_loss is ONE direction of a symmetric loss
                                     (a CLIP loss): the objective is (l(Q, D) + l(D, Q)) / 2,
                                     each gradient path named in each direction
    build_model, train_step(model, optimizer, microbatches), make_optimizer, DTYPE,
    MAX_GRAD_NORM, full_parameters   as in the token mode (trainer_file)

`problems` names what a coupled file lacks; trainer_file.load raises it as TrainerFileError.

    python -c "import pclab.experiments.trainer_check.coupled_contract as c; print(c.SIGNATURES)"
"""

from __future__ import annotations

from types import ModuleType

SIGNATURES = {  # every function of the coupled contract, as the check calls it
    "build_model": (),
    "batch_loss": ("model", "microbatches"),
    "make_microbatch": ("n", "generator"),
    "embed": ("model", "microbatch"),
    "embedding_loss": ("model", "queries", "documents"),
    "train_step": ("model", "optimizer", "microbatches"),
    "make_optimizer": ("params",),
    "full_parameters": ("model",),
}
MAX_ITEMS = 4096  # items of one microbatch, at most (a limit on typos, as MAX_SIDE is)


def _defines(module: ModuleType, name: str) -> bool:
    return callable(getattr(module, name, None))


def symmetric(module: ModuleType) -> bool:
    """SYMMETRIC as the file sets it (False when it does not; `problems` checks its type)."""
    return getattr(module, "SYMMETRIC", False) is True


def claims(module: ModuleType) -> bool:
    """The file is a coupled trainer: it defines batch_loss, or embedding_loss (or embed)
    and no token_losses."""
    if _defines(module, "batch_loss"):
        return True
    pair = _defines(module, "embedding_loss") or _defines(module, "embed")
    return pair and not _defines(module, "token_losses")


def problems(module: ModuleType) -> list[str]:
    """What a coupled file lacks, one sentence each (empty: the contract holds)."""
    missing = [f"{name}()" for name in ("build_model", "train_step") if not _defines(module, name)]
    found = [f"missing {', '.join(missing)}"] if missing else []
    return found + objective_problems(module)


def objective_problems(module: ModuleType) -> list[str]:
    """What a coupled file's objective lacks (make_microbatch, batch_loss or embed and
    embedding_loss, SYMMETRIC), one sentence each: the coupled run mode's too."""
    found = []
    if not _defines(module, "make_microbatch"):
        found.append(
            "missing make_microbatch(n, generator): the coupled mode (batch_loss) builds "
            "each microbatch of n items with it"
        )
    embed, loss = _defines(module, "embed"), _defines(module, "embedding_loss")
    if embed != loss:
        have, lack = ("embed", "embedding_loss") if embed else ("embedding_loss", "embed")
        found.append(f"{have}() without {lack}(): give both, or neither")
    elif not embed and not _defines(module, "batch_loss"):
        found.append("missing batch_loss(model, microbatches), or embed() and embedding_loss()")
    flag = getattr(module, "SYMMETRIC", False)
    if not isinstance(flag, bool):
        found.append(f"SYMMETRIC={flag!r} must be True or False")
    elif flag and not (embed and loss):
        found.append(
            "SYMMETRIC = True without embed() and embedding_loss(): it says embedding_loss is "
            "one direction of a symmetric loss"
        )
    return found
