"""One entry of the examples' index (examples.py): a module other files import, or a trainer
with its answer key and verdict; the verdict words and the transformers Trainer's folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pclab.experiments.trainer_check.frameworks.setting import FOLDERS
from pclab.paths import EXAMPLES_ROOT

HF = f"frameworks/{FOLDERS['transformers']}"  # the real transformers.Trainer's folder


@dataclass(frozen=True)
class Module:
    """A file other files import, no trainer of its own."""

    path: str  # below examples/
    shows: str  # what it holds, in one line (Markdown)

    @property
    def code(self) -> str:
        return Path(self.path).stem

    @property
    def file(self) -> Path:
        return EXAMPLES_ROOT / self.path


@dataclass(frozen=True)
class Example(Module):
    """A trainer the page can check, with its answer key and its verdict."""

    scheme: str  # what its step applies (token: core.update_weights; coupled_schemes); a run
    # example (train_loop): the run diagnoses its check names, "—" for none
    verdict: str  # the check's verdict on it at P = 2 and K = `accum`
    accum: int = 2
    mode: str = ""  # "coupled_run": a contrastive loop, which the page words as one


def _t(stem: str, shows: str, scheme: str, verdict: str, accum: int = 2, mode: str = "") -> Example:
    return Example(f"trainers/{stem}.py", shows, scheme, verdict, accum, mode)


SAME, DIFFERENT = "same_update", "different"
