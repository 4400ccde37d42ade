"""mypy on the package's launching layer and command line, strict (pyproject.toml's
[tool.mypy] overrides): the types where processes meet are checked, not just written."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRICT = [
    "pclab/core",
    "pclab/runners",
    "pclab/cli.py",
    "pclab/paths.py",
    "pclab/experiments/base.py",
    "pclab/experiments/declare.py",
    "pclab/experiments/command.py",
    "pclab/experiments/registry.py",
    "pclab/experiments/trainer_check",
]


def test_the_launching_layer_is_strictly_typed(tmp_path):
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "--follow-imports=silent"]
    done = subprocess.run([*cmd, *STRICT], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]


def test_the_strict_list_is_the_configured_one():
    """The files checked here and the modules pyproject.toml makes strict are the same."""
    config = (ROOT / "pyproject.toml").read_text()
    for path in STRICT:
        module = path.removesuffix(".py").replace("/", ".")
        assert f'"{module}.*"' in config or f'"{module}"' in config, module
