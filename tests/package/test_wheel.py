"""The package as a user installs it: a wheel built from this checkout, installed into a fresh
virtual environment that holds only torch, and `pclab check` run from another folder.

One build and one environment per session: the venv, torch from the local wheel store, the
wheel with its one other dependency, numpy. Measured: the set-up 35 s (before --no-compile)
and each check 10-11 s on a quiet two-core box; beside a load average of 26 (13 runnable
tasks a core) a step takes about 13 times as long, so the set-up ~460 s. The module's limit
(TIMEOUT_S) is about twice that: pytest-timeout counts the session fixture's set-up against
the first test that asks for it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "trainers"
APP_LIBRARIES = {"streamlit", "altair", "pandas", "segno"}
NOT_TOP_LEVEL = {"core", "runners", "experiments", "ui", "sections", "bench", "tests"}

TIMEOUT_S = 900

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TIMEOUT_S)]


# The venv's Python sees only what is installed in it: a PYTHONPATH naming this checkout
# would make pip find the lab already there and the check run from the source tree. And it
# caches bytecode, as a user's environment does: torch is installed --no-compile (below), so
# the first process compiles what it imports, once, for every later one (with
# PYTHONDONTWRITEBYTECODE set, as on this box, each of a check's four processes would
# compile torch again: 67 s for the first check in the suite).
UNSET = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in UNSET}


def _run(cmd: list[str], cwd: Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True, timeout=timeout
    )


def _ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> dict[str, Path]:
    """{"python", "pclab", "site", "elsewhere"}: a venv with torch and the built wheel."""
    base = tmp_path_factory.mktemp("wheel")
    # The source the wheel is built from: a copy, so the build writes nothing into the checkout.
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "pclab", source / "pclab", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = base / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _ok(_run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), "."], source))
    (wheel,) = wheels.glob("parallel_correctness_lab-*.whl")

    venv = base / "venv"
    _ok(_run([sys.executable, "-m", "venv", str(venv)], base))
    python = venv / "bin" / "python"
    torch_pin = f"torch=={torch.__version__.split('+')[0]}"  # the build this suite runs on
    # --no-compile: byte-compiling all of torch is a third of the install (30 s -> 20 s on a
    # quiet box); the checks compile only the modules they import (CLEAN_ENV).
    install = [str(python), "-m", "pip", "install", "-q", "--no-compile"]
    _ok(_run([*install, torch_pin], base))
    _ok(_run([*install, str(wheel)], base))
    site = _ok(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], base)
    )
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return {
        "python": python,
        "pclab": venv / "bin" / "pclab",
        "site": Path(site.stdout.strip()),
        "elsewhere": elsewhere,
    }


def test_the_environment_holds_torch_numpy_and_the_lab_but_nothing_of_the_app(installed):
    listed = _ok(_run([str(installed["python"]), "-m", "pip", "list", "--format=json"], ROOT))
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"torch", "numpy", "parallel-correctness-lab"} <= names
    assert not names & APP_LIBRARIES
    top_level = {p.name for p in installed["site"].iterdir()}
    assert "pclab" in top_level
    assert not top_level & NOT_TOP_LEVEL, top_level & NOT_TOP_LEVEL
    assert sysconfig.get_path("purelib") != str(installed["site"])  # really another environment


@pytest.mark.parametrize(
    ("example", "exit_code", "scheme"),
    [("correct_manual", 0, "global_token"), ("ddp_mean_of_local_means", 1, "replica_mean")],
)
def test_pclab_check_from_another_folder_gives_the_verdict(installed, example, exit_code, scheme):
    trainer = EXAMPLES / f"{example}.py"
    done = _run([str(installed["pclab"]), "check", str(trainer), "--json"], installed["elsewhere"])
    assert done.returncode == exit_code, done.stderr[-3000:]
    report = json.loads(done.stdout)
    uneven = next(s for s in report["scenarios"] if s["name"] == "uneven")
    assert uneven["scheme"] == scheme


def test_python_dash_m_pclab_is_the_same_command(installed):
    done = _run([str(installed["python"]), "-m", "pclab", "run", "nope"], installed["elsewhere"])
    assert done.returncode == 2
    assert "unknown experiment 'nope'" in done.stderr
    assert "negatives" in done.stderr  # the registry's names, listed
