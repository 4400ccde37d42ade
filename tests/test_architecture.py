"""Layering rules from the design: core is pure, runners never import Streamlit."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN_IN_CORE = ("streamlit", "subprocess", "torch.distributed", "multiprocessing", "os.system")


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("path", sorted(ROOT.glob("core/*.py")), ids=lambda p: p.name)
def test_core_is_pure(path):
    bad = [
        m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_IN_CORE)
    ]
    assert bad == []


@pytest.mark.parametrize("path", sorted(ROOT.glob("runners/**/*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_runners_never_import_streamlit(path):
    assert not [m for m in imported_modules(path) if m.split(".")[0] == "streamlit"]


@pytest.mark.parametrize(
    "path", sorted([*ROOT.glob("core/*.py"), *ROOT.glob("sections/*.py")]), ids=lambda p: p.name
)
def test_small_files(path):
    limit = 300 if path.parent.name == "core" else 150
    assert len(path.read_text().splitlines()) <= limit


def test_no_shell_anywhere():
    offenders = []
    for path in [
        *ROOT.glob("core/*.py"),
        *ROOT.glob("runners/**/*.py"),
        *ROOT.glob("ui/*.py"),
        *ROOT.glob("sections/*.py"),
    ]:
        text = path.read_text()
        if "shell=True" in text or "os.system(" in text:
            offenders.append(path.name)
    assert offenders == []
