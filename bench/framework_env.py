"""A framework that cannot share the lab's environment, measured from one of its own: a plain
virtual environment outside the checkout with the lab's torch installed first (so the
framework cannot swap it for another build), then the framework at its pin and this checkout
(editable), then its rows of the framework table recorded under that environment's Python, so
the check's ranks run under it too.

    python -m bench.framework_env litgpt                      # venv: $TMPDIR/pcl-litgpt
    python -m bench.framework_env litgpt --venv ~/venvs/litgpt
    python -m bench.framework_env litgpt --dry-run            # print the commands only
    python -m bench.framework_env torchtune                   # venv: $TMPDIR/pcl-torchtune

The last steps are `python -m pclab.experiments.trainer_check.frameworks --only litgpt`: it
rewrites that package's rows of pclab/artifacts/framework_checks.json and keeps the others; and,
for a package with a row across a run, the same with `--runs` (framework_runs.json). An
existing environment is reused (pip only adds what is missing). The tests find it at the same
default path (tests/runners/test_litgpt.py, test_torchtune.py), or where $PCL_LITGPT_PYTHON
($PCL_TORCHTUNE_PYTHON) points.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import ROOT

# package -> its exact pins. litgpt 0.5.13 requires huggingface-hub<1.4, transformers 5.24.0
# (requirements.txt) >=1.31, so the two cannot share one environment. torchtune 0.6.1 needs
# torchao, and only torchao 0.13.0-0.15.0 import beside torch 2.13.0 (0.16.0 lacks
# int4_weight_only, 0.12.0 needs a torch._inductor module 2.13.0 no longer has).
OWN_ENVIRONMENT = {
    # requests: litgpt's own command line needs it (`litgpt` sets jsonargparse's URL read mode,
    # litgpt/__main__.py:69), and fit() saves a checkpoint's hyperparameters through it
    "litgpt": ("litgpt==0.5.13", "requests==2.34.2"),
    "torchtune": ("torchtune==0.6.1", "torchao==0.15.0"),
    "ai2-olmo-core": ("ai2-olmo-core==3.0.0",),  # it would move huggingface_hub to 1.33.0
}
PYTHON_ENV = "PCL_{}_PYTHON"  # e.g. PCL_LITGPT_PYTHON: a Python that has the package


def python_env(package: str) -> str:
    """The variable naming a Python that has `package`: PCL_AI2_OLMO_CORE_PYTHON for
    ai2-olmo-core."""
    return PYTHON_ENV.format(package.upper().replace("-", "_"))


def torch_pin(requirements: Path = ROOT / "requirements.txt") -> str:
    """The lab's torch pin, as requirements.txt states it (torch==2.13.0: the CPU build)."""
    for line in requirements.read_text(encoding="utf-8").splitlines():
        if re.match(r"torch==", line.strip()):
            return line.split("#")[0].strip()
    raise ValueError(f"{requirements}: no torch== pin")


def default_venv(package: str) -> Path:
    """Outside any checkout: the temporary directory's pcl-<package>."""
    return Path(tempfile.gettempdir()) / f"pcl-{package}"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def python_for(package: str) -> Path | None:
    """A Python whose environment has `package`: $PCL_<PACKAGE>_PYTHON, else the default
    environment's, when it exists and has the package's distribution installed; else None."""
    named = os.environ.get(python_env(package))
    candidate = Path(named) if named else venv_python(default_venv(package))
    if not candidate.is_file():
        return None
    probe = [
        str(candidate),
        "-c",
        f"import importlib.metadata as m; m.version({package!r})",  # the distribution's name
    ]
    return candidate if subprocess.run(probe, capture_output=True).returncode == 0 else None


def commands(package: str, venv: Path, checkout: Path = ROOT) -> list[list[str]]:
    """The steps, in order: create, torch first, the framework and the lab, record its rows
    (the one-update rows, then its rows across a run where the table has one)."""
    from pclab.experiments.trainer_check.frameworks.run_table import ROWS

    python = str(venv_python(venv))
    record = [python, "-m", "pclab.experiments.trainer_check.frameworks"]
    across_a_run = (
        [record + ["--runs", "--only", package]] if package in {r.package for r in ROWS} else []
    )
    pin = torch_pin(checkout / "requirements.txt")
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    steps = [] if venv_python(venv).is_file() else [[sys.executable, "-m", "venv", str(venv)]]
    return steps + [
        pip + [pin],
        pip + [pin, *OWN_ENVIRONMENT[package], "-e", str(checkout)],  # torch stays the lab's
        record + ["--only", package],
        *across_a_run,
    ]


def inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.framework_env", description=__doc__.splitlines()[0]
    )
    parser.add_argument("package", choices=sorted(OWN_ENVIRONMENT))
    parser.add_argument("--venv", type=Path, default=None, help="default: $TMPDIR/pcl-PACKAGE")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    venv = args.venv or default_venv(args.package)
    if inside(venv, ROOT):  # pytest, ruff and the wheel would all walk into it
        parser.error(f"--venv {venv}: inside the checkout {ROOT}; put it outside")
    for step in commands(args.package, venv):
        print("+ " + shlex.join(step), flush=True)
        if not args.dry_run:
            subprocess.run(step, cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
