"""The fast tier (`python -m pytest -m quick`, tests/conftest.py's QUICK_TIER) selects tests
that exist: every entry names a test file, or a test function defined in it, and each part of
the tier (core, contracts, pages, one launch) is non-empty; the README gives the command."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import QUICK_ENTRIES, QUICK_TIER

ROOT = Path(__file__).resolve().parents[1]


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def test_every_part_of_the_tier_is_there_and_non_empty():
    assert set(QUICK_TIER) == {"core", "contracts", "pages", "launch"}
    assert all(QUICK_TIER.values())
    assert len(QUICK_ENTRIES) == sum(len(entries) for entries in QUICK_TIER.values())


@pytest.mark.parametrize("entry", sorted(QUICK_ENTRIES))
def test_each_entry_names_an_existing_test(entry):
    path, _, function = entry.partition("::")
    file = ROOT / path
    assert file.is_file() and file.name.startswith("test_"), f"{entry}: no such test file"
    functions = _test_functions(file)
    assert functions, f"{entry}: the file defines no test"
    if function:
        assert function in functions, f"{entry}: {path} defines no {function}()"


def test_this_file_is_marked_quick_by_the_hook(request):
    # The marker comes from conftest.py's collection hook, never typed here: if the hook
    # stopped matching entries, `-m quick` would select nothing and this test would fail.
    assert request.node.get_closest_marker("quick") is not None


def test_the_readme_gives_the_command():
    assert "python -m pytest -m quick" in (ROOT / "README.md").read_text(encoding="utf-8")
