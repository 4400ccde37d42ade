"""How an exception the user's trainer raised is said: one line at the user's own file and
line (the lab's frames are not the user's business). Trainer.call raises TrainerRaised with it;
trainer_file.load says an import error with it."""

from __future__ import annotations

import traceback
from pathlib import Path


class TrainerRaised(RuntimeError):
    """The trainer raised while it ran; the message names the user's file and line."""


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
