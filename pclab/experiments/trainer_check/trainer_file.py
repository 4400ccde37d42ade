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
mode whose contract claims the file), and is `Trainer.mode`.

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
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pclab.experiments.trainer_check.coupled_contract as coupled_contract
import pclab.experiments.trainer_check.modes as modes
from pclab.experiments.trainer_check.doing import now_in
from pclab.experiments.trainer_check.token_contract import SIGNATURES

if TYPE_CHECKING:  # torch is imported by the methods that run on a rank: the command's and
    import torch  # the report's imports of this module stay free of it (modes.py)

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


class TrainerRaised(RuntimeError):
    """The trainer raised while it ran; the message names the user's file and line."""


@dataclass(frozen=True)
class Trainer:
    path: Path
    module: ModuleType
    vocab_size: int
    seq_len: int
    batch_size: int
    first_position_labelled: bool = True
    dtype: str = "float64"
    max_grad_norm: float | None = None
    mode: str = "token"  # modes.NAMES: "coupled" for a file with batch_loss
    global_batch: bool = False  # GLOBAL_BATCH: train_step is handed every rank's microbatches

    def has(self, name: str) -> bool:
        """The file defines the optional function `name`."""
        return callable(getattr(self.module, name, None))

    @property
    def labelled_columns(self) -> int:
        """Positions of a sequence that may hold a counted label."""
        return self.seq_len - (0 if self.first_position_labelled else 1)

    @property
    def capacity(self) -> int:
        """Label positions of one microbatch: the most any n_rk can be (coupled: items)."""
        if self.mode in ("coupled", "coupled_run"):
            return coupled_contract.MAX_ITEMS
        return self.labelled_columns * self.batch_size

    def call(self, name: str, *args: object) -> Any:
        """Call the file's `name`, turning any exception into TrainerRaised at the user's
        own line (the lab's frames are not the user's business)."""
        function = getattr(self.module, name)
        outer = now_in(f"{name}()")  # left as is when it raises: the where
        try:
            result = function(*args)
        except Exception as exc:  # noqa: BLE001 - reported, with where it happened
            raise TrainerRaised(where(exc, self.path, name)) from None
        now_in(outer)
        return result

    # The file's model and optimizer, fresh for every step the check takes (the reference,
    # the user's step, the SGD re-run, a run's loop), and what the file's train_step is handed.

    def build(self, device: str = "cpu") -> torch.nn.Module:
        """A fresh model from the file, on this rank's device (--device cuda: its local GPU)."""
        model = self.call("build_model")
        if device == "cuda":
            import torch

            model = model.to(torch.device("cuda", torch.cuda.current_device()))
        return model

    def make_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        """The file's make_optimizer(params), or SGD at learning rate 0.1."""
        import torch

        if self.has("make_optimizer"):
            return self.call("make_optimizer", model.parameters())
        return torch.optim.SGD(model.parameters(), lr=0.1)

    def parameters(self, model: torch.nn.Module, stepped_by_user: bool) -> dict[str, Any]:
        """The model's parameters by name: the file's full_parameters(model) for a model the
        user's train_step ran on (sharded or wrapped), else its named_parameters()."""
        import torch

        if stepped_by_user and self.has("full_parameters"):
            full = self.call("full_parameters", model)
            if not isinstance(full, dict):
                raise ValueError("full_parameters returned no dict of {name: tensor}")
            return {n: torch.as_tensor(t).detach() for n, t in full.items()}
        return {n: p.detach() for n, p in model.named_parameters()}

    def step_input(
        self, batches: list[list[dict[str, Any]]], rank: int, model: torch.nn.Module
    ) -> Any:
        """What train_step is handed, on the model's device: this rank's K microbatches, or with
        GLOBAL_BATCH = True every rank's (P lists of K, by rank: the framework's own sampler
        hands out this rank's). The file's fresh_start() first, when it has one: each call is
        a new update from a fresh model."""
        if self.has("fresh_start"):
            self.call("fresh_start")
        if self.global_batch:
            return [[on_device(b, model) for b in row] for row in batches]
        return [on_device(b, model) for b in batches[rank]]


def on_device(batch: dict[str, Any], model: torch.nn.Module) -> dict[str, Any]:
    """The microbatch's tensors on the model's device (anything else as it is)."""
    import torch

    device = next(model.parameters()).device
    return {k: t.to(device) if isinstance(t, torch.Tensor) else t for k, t in batch.items()}


def where(exc: BaseException, path: Path, name: str) -> str:
    """'trainer.py:12 in train_step: ZeroDivisionError: division by zero'; an exception raised
    `from` another also names the first of its chain, which says what went wrong where the
    last often does not (OLMo-core's Trainer: 'RuntimeError: An error occurred (from
    RuntimeError: nan loss encountered at step 2)')."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    at = (
        f"{path.name}:{frames[-1].lineno} in {frames[-1].name}" if frames else f"{path.name} {name}"
    )
    said = f"{at}: {_named(exc)}"
    first = exc.__cause__
    while first is not None and first.__cause__ is not None:
        first = first.__cause__
    return said if first is None else f"{said} (from {_named(first)})"


def _named(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return type(exc).__name__ + (f": {text}" if text else "")


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
