"""mypy on the package (pyproject.toml's [tool.mypy]): the math, the launching layer, the
command line and the trainer check strictly (the config's strict list), and the whole
package (ui and the pages with mypy's defaults) clean under the project's config: the types
where processes meet are checked, not just written."""

import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One mypy cache for the module's runs: the whole package is analysed once (~25 s on an
    idle box), and the strict list's run, with the same options, reads it (~0.3 s)."""
    return tmp_path_factory.mktemp("mypy-cache")


def mypy(cache: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_whole_package_is_clean_under_the_projects_config(cache):
    done = mypy(cache)  # the config's files: the package
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    every = len(list((ROOT / "pclab").rglob("*.py")))  # the pages and ui included
    assert f"no issues found in {every} source files" in done.stdout, done.stdout


def test_the_launching_layer_is_strictly_typed(cache):
    done = mypy(cache, *STRICT)  # the same options as the package's run: its cache holds
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]


def test_the_strict_list_is_the_configured_one():
    """The files checked here and the modules pyproject.toml makes strict are the same."""
    config = (ROOT / "pyproject.toml").read_text()
    for path in STRICT:
        module = path.removesuffix(".py").replace("/", ".")
        assert f'"{module}.*"' in config or f'"{module}"' in config, module


def test_streamlits_and_altairs_own_types_are_still_read(cache, tmp_path):
    """pyproject.toml skips the packages the lab never imports that Streamlit and Altair pull in
    (IPython, narwhals, ...): a page's misuse of Streamlit or Altair is still an error (both
    found with and without those skipped)."""
    planted = tmp_path / "planted_page.py"
    planted.write_text(
        "import altair as alt\nimport streamlit as st\n\n"
        "st.columns(2, gap=5, nope=1)\n"  # no such keyword
        "st.metric(label=3, value=1)\n"  # a label is a str
        "alt.Chart(width='wide')\n",  # a width is a number or "container"
        encoding="utf-8",
    )
    done = mypy(cache, "--config-file", str(ROOT / "pyproject.toml"), str(planted))
    assert done.returncode == 1, done.stdout[-3000:]
    assert 'Unexpected keyword argument "nope"' in done.stdout, done.stdout[-3000:]
    assert 'planted_page.py:5: error: Argument "label" has incompatible type' in done.stdout
    assert 'planted_page.py:6: error: Argument "width" to "Chart"' in done.stdout
