"""What a row of the framework table is (`Setting`), where its adapter lives, and the
constants every record shares: P and K, the scenario a record is made from, the modules a
warm pool may import ahead, the packages installed without their dependencies.

    python -c "from pclab.experiments.trainer_check import frameworks; print(frameworks.FOLDERS)"
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from pclab.paths import FRAMEWORK_EXAMPLES_DIR

WORLD_SIZE, ACCUM = 2, 2  # P and K of every record (K: unless its setting says otherwise)
MEASURED_SCENARIO = "uneven"  # the record's scheme, weights and max_abs_diff are this one's
MEASURED_COUPLED = "uneven_microsteps"  # a coupled record's scheme, factors and residual
# package -> its adapters' folder, examples/frameworks/<folder>/: an adapter lives with the
# package whose version its record carries
FOLDERS = {
    "accelerate": "accelerate",
    "lightning": "lightning",
    "transformers": "hf_trainer",
    "trl": "trl",
    "deepspeed": "deepspeed",
    "torch": "fsdp2",
    "litgpt": "litgpt",
    "torchtune": "torchtune",
    "ai2-olmo-core": "olmo_core",
    "open-clip-torch": "openclip",
    "sentence-transformers": "sentence_transformers",
}
SHARED_FOLDER = "shared"  # examples/frameworks/shared/: what adapters of several frameworks import


@dataclass(frozen=True)
class Shared:
    """A module the adapters import, no trainer of its own (examples/frameworks/<folder>/)."""

    code: str  # its file stem
    folder: str
    shows: str  # what it holds, in one line (examples/README.md)

    @property
    def path(self) -> Path:
        return FRAMEWORK_EXAMPLES_DIR / self.folder / f"{self.code}.py"


SHARED = (
    Shared(
        "framework_lm",
        SHARED_FOLDER,
        "the tiny causal LM (labels shifted as transformers' are) and the evidence file "
        "($PCL_FRAMEWORK_RECORD) most adapters share; each puts this folder on sys.path",
    ),
    Shared(
        "openclip_clip_loss",
        FOLDERS["open-clip-torch"],
        "OpenCLIP's own loss.py, loaded from the installed package without its __init__ "
        "(torchvision), the two-tower model and the step its adapters share",
    ),
    Shared(
        "sbert_model",
        FOLDERS["sentence-transformers"],
        "a SentenceTransformer built from the library's own modules (nothing downloaded) and "
        "the DDP step its adapters share",
    ),
    Shared(
        "framework_run",
        SHARED_FOLDER,
        "what the run-mode framework adapters (run_*.py) share: the check's epochs as each "
        "framework's own data, and the evidence file",
    ),
)
SHARED_MODULES = tuple(s.code for s in SHARED)  # bundled beside the adapters, not trainers


@dataclass(frozen=True)
class Setting:
    """One row: a framework's setting, checked by its adapter or recorded with a reason."""

    code: str  # its stable key (the record, the page's widgets, the catalogue): the adapter's
    # file stem; a setting that cannot run here has a code of its own
    framework: str  # as users name it
    package: str  # the distribution whose installed version is recorded
    setting: str  # in plain words: rewording it changes nothing else
    default: bool  # the framework's default setting
    reason: str | None = None  # why it cannot run here (no adapter); None: it has one
    examined: str | None = None  # the version the reason is about, when none is installed
    accum: int = ACCUM  # K of its check: 1 where the library has no accumulation of its own
    also: tuple[str, ...] = ()  # other packages its adapter drives: their versions recorded too

    @property
    def adapter(self) -> str | None:
        """Its adapter's file stem (the code), None for a setting that cannot run here."""
        return None if self.reason else self.code

    @property
    def path(self) -> Path:
        """Its adapter, examples/frameworks/<folder>/<code>.py (ValueError: it has none)."""
        if self.adapter is None:
            raise ValueError(f"setting {self.code!r} has no adapter: {self.reason}")
        return FRAMEWORK_EXAMPLES_DIR / FOLDERS[self.package] / f"{self.adapter}.py"


# package -> the modules its adapters' ranks import, which a warm-pool zygote can import ahead
# (the server does unless PCL_PRELOAD_FRAMEWORKS=0: BENCHMARKS.md, "Frameworks")
PRELOAD = {
    "accelerate": ("accelerate",),
    "lightning": ("lightning.pytorch",),
    "transformers": ("transformers.trainer", "transformers.models.llama.modeling_llama"),
    "litgpt": ("litgpt.finetune.full",),
}
# package -> its pin in requirements-nodeps.txt, installed with `pip install --no-deps -r`:
# its declared dependencies would replace the lab's torch (open-clip-torch: torchvision)
NO_DEPS = {"open-clip-torch": "open-clip-torch==3.3.0"}


def installed_version(package: str) -> str | None:
    """The installed version of `package` from its metadata (nothing imported), else None."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def preload_modules() -> tuple[str, ...]:
    """PRELOAD's modules of the packages this Python has."""
    return tuple(m for p, modules in PRELOAD.items() if installed_version(p) for m in modules)
