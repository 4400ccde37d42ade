"""The provenance of a run: one sha256 over every source file its worker may execute.

A worker module, every module of its own project that it imports (at any depth, inside
functions too, and the packages' __init__ files that importing runs), read from the
sources rather than imported: so an edit to `pclab/core/clipping.py` changes the hash of the
clipping experiment's worker, and with it the page's cache key and the run record. Names
resolve through the path finder and each parent's spec, so hashing never imports the
worker's modules (nor torch with them). Modules outside the worker's project (torch, numpy,
the standard library) are not hashed: their versions go into the run record instead. The
hash is memoised per process on the stamps of the files and their folders: a launch after
the first stats them and reads nothing.

    python -m pclab.runners.code_hash pclab.experiments.clipping    # hash and file list
"""

from __future__ import annotations

import ast
import hashlib
import sys
import threading
from collections.abc import Iterable
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

from pclab.core.validation import InvalidInput
from pclab.paths import IMPORT_ROOT

# path -> (mtime_ns, size, modules it names): a launch re-parses only edited files
_PARSED: dict[Path, tuple[int, int, frozenset[str]]] = {}
# (worker, sys.path) -> (its files, their stamps when hashed, the hash): a repeat only stats
# the files (sys.path too: a module outside the import root resolves through it)
_Stamps = tuple[tuple[str, int, int], ...]
_HASHED: dict[tuple[str, tuple[str, ...]], tuple[tuple[Path, ...], _Stamps, str]] = {}
# One parse at a time in this process: CPython 3.11's AST constructor keeps its recursion
# depth in per-interpreter state, so two Streamlit sessions parsing at once can raise
# "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905).
_PARSE_LOCK = threading.Lock()


def module_file(name: str) -> Path | None:
    """The source file of module `name` below the import root, else where Python's path
    finder would find it (None for a module without a source file, or a name that is not a
    module). Packages resolve to their __init__.py. Nothing is imported: a parent package's
    search locations come from its spec, so hashing never runs the worker's imports (torch)."""
    base = IMPORT_ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    if base.is_dir():
        return None  # a namespace package (a folder without __init__.py): no source of its own
    spec = _spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _spec(name: str) -> ModuleSpec | None:
    """`name`'s spec from the path finder alone, walking down from its top-level package
    through each parent's submodule locations (importlib.util.find_spec imports the parents)."""
    spec: ModuleSpec | None = None
    for prefix in _with_parents(name):
        locations = None  # the top-level package: sys.path
        if spec is not None:
            if spec.submodule_search_locations is None:
                return None  # a plain module's "submodule" is an attribute of it
            locations = list(spec.submodule_search_locations)
        try:
            spec = PathFinder.find_spec(prefix, locations)
        except (ImportError, ValueError, KeyError):
            # KeyError: a namespace parent's path is read from sys.modules, where a module
            # this finder never imported is absent.
            return None
        if spec is None:
            return None
    return spec


def _entry_points(worker: str) -> list[tuple[str, Path]]:
    """What `python -m worker` runs: the module, or a package's __init__ and __main__."""
    path = module_file(worker)
    if path is None:
        raise InvalidInput("worker", worker, "one_of", "an importable module with a source file")
    main = path.parent / "__main__.py"
    if path.name == "__init__.py" and main.is_file():
        return [(worker, path), (f"{worker}.__main__", main)]
    return [(worker, path)]


def _named_modules(path: Path, module: str) -> frozenset[str]:
    """Every module name an import statement in `path` may load (relative ones resolved)."""
    stat = path.stat()
    cached = _PARSED.get(path)
    if cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
        return cached[2]
    names: set[str] = set()
    package = module.split(".")
    if path.name != "__init__.py":  # a module's relative imports start from its package
        package = package[:-1]
    with _PARSE_LOCK:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in _import_statements(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join([*anchor, node.module] if node.module else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    found = frozenset(names)
    _PARSED[path] = (stat.st_mtime_ns, stat.st_size, found)
    return found


# The fields of a statement that hold statements: an import is a statement, so it sits in one
# of these lists (a module's, a function's or class's, a branch's, a handler's or a case's body),
# never inside an expression. Walking these alone finds every import ast.walk finds, visiting
# a tenth of the nodes: a cold `pclab run` hashes its worker before it launches anything.
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _import_statements(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in `tree`, at any depth."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
            continue
        for name in _BODIES:
            todo.extend(getattr(node, name, ()))
    return found


def _with_parents(name: str) -> list[str]:
    """`a.b.c` -> a, a.b, a.b.c: importing a module runs its packages' __init__ first."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def source_files(worker: str) -> dict[str, Path]:
    """module name -> source file, for the worker and everything of its project it imports.
    The project is the worker's top-level package plus `pclab` (a checkout's benchmark
    worker runs the lab's code too)."""
    projects = {worker.split(".")[0], "pclab"}
    files: dict[str, Path] = {}
    parents = [(name, module_file(name)) for name in _with_parents(worker)[:-1]]
    todo = [*_entry_points(worker), *((name, path) for name, path in parents if path)]
    while todo:
        module, path = todo.pop()
        if module in files:
            continue
        files[module] = path
        for name in _named_modules(path, module):
            for candidate in _with_parents(name):
                if candidate.split(".")[0] in projects and candidate not in files:
                    found = module_file(candidate)
                    if found is not None:
                        todo.append((candidate, found))
    return files


def _stamps(paths: Iterable[Path]) -> _Stamps:
    """(path, mtime_ns, size) of each file and of each folder holding one: an edit changes a
    file's stamp, and a module added beside them (which may now resolve an import) a folder's."""
    stamps = []
    for path in sorted({*paths, *(path.parent for path in paths)}):
        stat = path.stat()
        stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


def worker_code_hash(worker: str) -> str:
    """sha256 (hex) over the worker's project sources (`source_files`), in module order.
    Memoised per process on the files' stamps: a repeat costs a stat of each file."""
    key = (worker, tuple(sys.path))
    cached = _HASHED.get(key)
    if cached is not None:
        try:
            if _stamps(cached[0]) == cached[1]:
                return cached[2]
        except OSError:  # a file was removed: compute afresh (and raise if the worker went)
            pass
    files = source_files(worker)
    stamps = _stamps(files.values())
    digest = hashlib.sha256()
    for module, path in sorted(files.items()):
        digest.update(module.encode() + b"\0" + path.read_bytes() + b"\0")
    _HASHED[key] = (tuple(files.values()), stamps, digest.hexdigest())
    return digest.hexdigest()


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "pclab.experiments.negatives"
    for name, file in sorted(source_files(target).items()):
        print(f"{name:<55} {file}")
    print(worker_code_hash(target))
