"""A user's trainer file: imported by path, as `python TRAINER.py` would run it, and checked
against the contract before anything is launched.

The contract (README, "Check your own trainer"):

    VOCAB_SIZE: int                      required
    SEQ_LEN: int = 8, BATCH_SIZE: int = 2  optional: a microbatch is BATCH_SIZE x SEQ_LEN
    build_model() -> torch.nn.Module     a fresh, identical float64 model on every call
    token_losses(model, microbatch) -> Tensor   one loss per counted label (1-D, maybe empty)
    train_step(model, optimizer, microbatches) -> None   the user's own update on one rank
    make_optimizer(params) -> Optimizer  optional (default SGD, lr 0.1)
    FIRST_POSITION_LABELLED: bool = True   optional: False and the check never puts a counted
                                         label at position 0 of a sequence
    DTYPE: str = "float64"               optional: "float64", "float32" or "bfloat16", the
                                         precision of the model, the run and the reference
    MAX_GRAD_NORM: float | None = None   optional: the reference clips the global gradient
                                         norm (every parameter, once) before stepping
    make_microbatch(n_terms, generator) -> dict   optional: your own microbatch with exactly
                                         n_terms terms (then VOCAB_SIZE is optional)
    full_parameters(model) -> {name: Tensor}   optional: the full parameters after the step,
                                         named as build_model()'s (sharded or wrapped models)
    GLOBAL_BATCH: bool = False           optional: True and train_step is handed every rank's
                                         microbatches (P lists of K, by rank), for a
                                         framework whose own sampler hands them out
    fresh_start() -> None                optional: called before every train_step (each is a
                                         new update from a fresh model): reset what a
                                         framework keeps per process

A file that defines batch_loss (or embed and embedding_loss without token_losses) is a
coupled trainer, its loss of one item depending on the others: coupled_contract says which
functions it needs. The mode is read here, once, from the registry (modes.of_module: the first
mode whose contract claims the file), and is `Trainer.mode`. On a rank the file's functions
run only through the Trainer (trainer.py).

FIRST_POSITION_LABELLED = False is for causal LMs, whose loss shifts the labels: position t
predicts the label at t + 1, so a label at position 0 is never a term. With it, every counted
label the check hands over is a term, so a trainer that counts labels before the shift and one
that counts terms after it get the same count, and the two questions come apart: is the count
right, and is the average right?
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pclab.experiments.trainer_check.modes as modes
from pclab.experiments.trainer_check.token_contract import SIGNATURES
from pclab.experiments.trainer_check.trainer import Trainer
from pclab.experiments.trainer_check.trainer_raised import where

DEFAULT_SEQ_LEN, DEFAULT_BATCH_SIZE, MAX_SIDE = 8, 2, 4096
MAX_VOCAB = 2**24  # a limit on nothing but typos: real vocabularies (50304, 256000) pass
DTYPES = ("float64", "float32", "bfloat16")
FIRST_POSITION = "FIRST_POSITION_LABELLED"


class TrainerFileError(ValueError):
    """The file cannot be used as a trainer (the message names the file, and its line).
    `code`: "signature" for a function the check cannot call as the contract does, else
    "contract"."""

    def __init__(self, message: str, code: str = "contract") -> None:
        super().__init__(message)
        self.code = code


def load(path: str | Path) -> Trainer:
    """Import the trainer file at `path` (its folder first on sys.path, like a script) and
    check the contract. Raises TrainerFileError with a one-line reason."""
    path = Path(path).expanduser().resolve()
    if path.suffix != ".py" or not path.is_file():
        raise TrainerFileError(f"{path}: not a Python file")
    name = f"pcl_trainer_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # not for an existing .py file
        raise TrainerFileError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # it may import its neighbours
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise TrainerFileError(f"{path.name}:{exc.lineno}: SyntaxError: {exc.msg}") from None
    except Exception as exc:  # noqa: BLE001 - an import error, a failing top-level line
        raise TrainerFileError(f"cannot import {where(exc, path, 'the file')}") from None
    mode = modes.of_module(module)  # the mode, read from the file
    if lacks := mode.contract.problems(module):
        raise TrainerFileError(f"{path.name}: {'; '.join(lacks)}")
    signatures = getattr(mode.contract, "signatures_for", lambda _: mode.contract.SIGNATURES)
    _check_signatures(path, module, signatures(module))
    own_batches = callable(getattr(module, "make_microbatch", None))
    defaults = {
        "VOCAB_SIZE": 1 if own_batches else None,
        "SEQ_LEN": DEFAULT_SEQ_LEN,
        "BATCH_SIZE": DEFAULT_BATCH_SIZE,
    }
    sizes: dict[str, int] = {}
    for key, default in defaults.items():
        value = getattr(module, key, default)
        top = MAX_VOCAB if key == "VOCAB_SIZE" else MAX_SIDE
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise TrainerFileError(f"{path.name}: {key}={value!r} must be a whole number 1..{top}")
        sizes[key] = value
    first = getattr(module, FIRST_POSITION, True)
    if not isinstance(first, bool):
        raise TrainerFileError(f"{path.name}: {FIRST_POSITION}={first!r} must be True or False")
    if not first and sizes["SEQ_LEN"] < 2:
        raise TrainerFileError(f"{path.name}: {FIRST_POSITION}=False needs SEQ_LEN >= 2")
    dtype = getattr(module, "DTYPE", "float64")
    if dtype not in DTYPES:
        raise TrainerFileError(f"{path.name}: DTYPE={dtype!r} must be one of {', '.join(DTYPES)}")
    global_batch = getattr(module, "GLOBAL_BATCH", False)
    if not isinstance(global_batch, bool):
        raise TrainerFileError(f"{path.name}: GLOBAL_BATCH={global_batch!r} must be True or False")
    max_norm = getattr(module, "MAX_GRAD_NORM", None)
    if max_norm is not None and (
        isinstance(max_norm, bool)
        or not isinstance(max_norm, int | float)
        or not 0 < max_norm < float("inf")
    ):
        raise TrainerFileError(f"{path.name}: MAX_GRAD_NORM={max_norm!r} must be a number > 0")
    return Trainer(
        path,
        module,
        sizes["VOCAB_SIZE"],
        sizes["SEQ_LEN"],
        sizes["BATCH_SIZE"],
        first,
        dtype,
        None if max_norm is None else float(max_norm),
        mode.name,
        global_batch,
    )


def expected_signature(name: str, signatures: dict[str, tuple[str, ...]] = SIGNATURES) -> str:
    return f"{name}({', '.join(signatures[name])})"


def _check_signatures(
    path: Path, module: ModuleType, signatures: dict[str, tuple[str, ...]]
) -> None:
    """Every contract function the file defines can be called as the check calls it (the
    file's mode's `signatures`): TrainerFileError(code="signature") showing the expected
    signature, before any process."""
    for name, args in signatures.items():
        function = getattr(module, name, None)
        if function is None:
            continue
        if not callable(function):
            raise TrainerFileError(f"{path.name}: {name} is not a function", "signature")
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):  # a builtin or C function: nothing to read
            continue
        try:
            signature.bind(*args)
        except TypeError:
            raise TrainerFileError(
                f"{path.name}: {name}{signature} cannot be called as "
                f"{expected_signature(name, signatures)}",
                "signature",
            ) from None
