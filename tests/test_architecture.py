"""The design's layering, enforced on the real import graph of every project file.

    sections -> ui -> experiments -> runners / core        (and never back, never in a circle)

The graph is read with `ast` from every import statement in the project, inside functions
too (a deferred import is still a dependency), so a circle cannot hide behind one.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pclab", "bench", "tests", "examples")
APP = ("pclab.ui", "pclab.sections")  # the Streamlit side
FORBIDDEN_IN_CORE = ("streamlit", "subprocess", "torch.distributed", "multiprocessing", "os.system")


# Deliberately broken files the trainer-check tests feed to the checker.
UNPARSABLE = {ROOT / "tests" / "trainers" / "syntax_error.py"}


def project_files() -> list[Path]:
    files = [ROOT / "app.py"]
    for package in PACKAGES:
        files += sorted((ROOT / package).rglob("*.py"))
    return [f for f in files if f.is_file() and f not in UNPARSABLE]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(path: Path) -> set[str]:
    """Every module name an import statement in `path` may load, at any depth."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import: resolved against this file's package
                package = module_name(path).split(".")
                if path.name != "__init__.py":
                    package.pop()
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(files: list[Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (names that are not modules are dropped)."""
    modules = {module_name(f): f for f in files}
    return {
        name: {m for m in imported_names(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as [a, b, ..., a], or [] when the graph has none (depth-first)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


GRAPH = import_graph(project_files())


def test_the_cycle_finder_finds_a_planted_circle():
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(planted) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "def f():\n    from pclab.runners import run_queue\n    import pclab.core.ledger\n"
    )
    assert {"pclab.runners.run_queue", "pclab.core.ledger"} <= imported_names(source)


def test_no_import_cycle_anywhere():
    assert find_cycle(GRAPH) == []


def _imports(prefix: str) -> dict[str, set[str]]:
    return {m: deps for m, deps in GRAPH.items() if m == prefix or m.startswith(prefix + ".")}


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_runners_import_no_experiment_and_no_page():
    bad = {
        m: sorted(
            d
            for d in deps
            if _in(d, "pclab.experiments") or _in(d, "pclab.ui") or _in(d, "pclab.sections")
        )
        for m, deps in _imports("pclab.runners").items()
    }
    assert {m: d for m, d in bad.items() if d} == {}


def test_core_imports_neither_runners_nor_experiments_nor_the_ui():
    bad = {
        m: sorted(d for d in deps if not _in(d, "pclab.core"))
        for m, deps in _imports("pclab.core").items()
    }
    assert {m: d for m, d in bad.items() if d} == {}


def test_rooms_import_no_page_and_no_experiment():
    """The live rooms' store (pclab/rooms: SQLite, no Streamlit) sits beside runners and core:
    the ui imports it, it imports neither the ui, the pages nor an experiment."""
    bad = {
        m: sorted(
            d
            for d in deps
            if any(_in(d, p) for p in ("pclab.ui", "pclab.sections", "pclab.experiments"))
        )
        for m, deps in _imports("pclab.rooms").items()
    }
    assert {m: d for m, d in bad.items() if d} == {}


def test_experiments_import_no_page():
    bad = {
        m: sorted(d for d in deps if _in(d, "pclab.ui") or _in(d, "pclab.sections"))
        for m, deps in _imports("pclab.experiments").items()
    }
    assert {m: d for m, d in bad.items() if d} == {}


def test_sections_reach_runs_only_through_the_ui():
    """A page may compute with an experiment's plan (its params, report checks), but it starts
    and reads runs only through ui.run_panel: never the launcher, the registry or a worker."""
    bad = {}
    for m, deps in _imports("pclab.sections").items():
        wrong = [
            d
            for d in deps
            if _in(d, "pclab.runners")
            or d in ("pclab.experiments.registry", "pclab.experiments.base")
            or d.endswith(".worker")
        ]
        if wrong:
            bad[m] = wrong
    assert bad == {}


@pytest.mark.parametrize("path", sorted(ROOT.glob("pclab/core/*.py")), ids=lambda p: p.name)
def test_core_is_pure(path):
    bad = [
        m
        for m in imported_names(path)
        if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_IN_CORE)
    ]
    assert bad == []


@pytest.mark.parametrize(
    "path",
    sorted(
        [
            *ROOT.glob("pclab/runners/**/*.py"),
            *ROOT.glob("pclab/experiments/**/*.py"),
            *ROOT.glob("pclab/rooms/*.py"),
        ]
    ),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_runners_experiments_and_rooms_never_import_streamlit(path):
    assert not [m for m in imported_names(path) if m.split(".")[0] == "streamlit"]


@pytest.mark.parametrize(
    "path",
    sorted(
        [
            *ROOT.glob("pclab/core/*.py"),
            *ROOT.glob("pclab/rooms/*.py"),
            *ROOT.glob("pclab/experiments/trainer_check/**/*.py"),
            *ROOT.glob("pclab/sections/*.py"),
        ]
    ),
    ids=lambda p: p.name,
)
def test_small_files(path):
    limit = 150 if path.parent.name == "sections" else 300
    assert len(path.read_text().splitlines()) <= limit


def test_no_shell_anywhere():
    checked = [p for p in project_files() if p != Path(__file__).resolve()]
    offenders = [
        str(path.relative_to(ROOT))
        for path in checked
        if "shell=True" in path.read_text() or "os.system(" in path.read_text()
    ]
    assert offenders == []


def test_every_experiment_is_registered_and_shaped_alike():
    from pclab.experiments import registry

    on_disk = {p.parent.name for p in (ROOT / "pclab" / "experiments").glob("*/__init__.py")}
    assert on_disk == set(registry.names())
    for name in registry.names():
        package = ROOT / "pclab" / "experiments" / name
        # cli.py is optional: without one, experiments.command.run_command is its CLI
        for part in ("params.py", "worker.py", "report.py", "__main__.py"):
            assert (package / part).is_file(), f"experiments/{name}/{part}"
        assert registry.get(name).name == name


def test_ruff_format_and_check_are_clean():
    """No line over 100 characters, no squeezing (`fmt: skip`), formatted, lint-clean."""
    ruff = [sys.executable, "-m", "ruff"]
    files = [str(p.relative_to(ROOT)) for p in project_files()]
    fmt = subprocess.run(
        [*ruff, "format", "--check", *files], cwd=ROOT, capture_output=True, text=True
    )
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    lint = subprocess.run([*ruff, "check", *files], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    mine = str(Path(__file__).resolve().relative_to(ROOT))
    squeezed = [f for f in files if f != mine and "fmt: skip" in (ROOT / f).read_text()]
    assert squeezed == []


def test_no_function_above_complexity_15():
    """ruff's mccabe (C901) at 15, stated here as well as in pyproject.toml: a function with
    more paths than that is split by responsibility, never exempted."""
    files = [str(p.relative_to(ROOT)) for p in project_files()]
    cmd = [sys.executable, "-m", "ruff", "check", "--select", "C901"]
    cmd += ["--config", "lint.mccabe.max-complexity = 15", *files]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    noqa = [f for f in files if "noqa: C901" in (ROOT / f).read_text()]
    assert noqa == [str(Path(__file__).resolve().relative_to(ROOT))]
