"""pclab.runners.code_hash: the run's provenance covers every source file its worker runs.

The file set is checked against the modules the worker really loads (a fresh interpreter's
sys.modules after importing it), and an edit to a core module in a copy of the package
changes the hash, the page's cache key and a real run's record.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pclab.runners.code_hash import source_files, worker_code_hash

ROOT = Path(__file__).resolve().parents[2]
WORKERS = ("pclab.experiments.negatives", "pclab.experiments.clipping", "bench.noop_worker")


def _loaded_project_modules(worker: str) -> set[str]:
    """The project's modules a fresh interpreter holds after importing the worker's code the
    way `python -m worker` does (package, then its __main__'s rank branch)."""
    code = (
        "import importlib, json, sys; "
        f"m = importlib.import_module({worker!r}); "
        f"importlib.import_module({worker!r} + '.worker') if hasattr(m, 'EXPERIMENT') else None; "
        "print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] in "
        "('pclab', 'bench'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("worker", WORKERS)
def test_every_module_the_worker_loads_is_hashed(worker):
    hashed = set(source_files(worker))
    missing = _loaded_project_modules(worker) - hashed
    assert missing == set()


def test_core_modules_are_in_the_clipping_experiments_provenance():
    files = source_files("pclab.experiments.clipping")
    assert files["pclab.core.clipping"] == ROOT / "pclab" / "core" / "clipping.py"
    assert "pclab.experiments.negatives" not in files  # another experiment is not its code
    assert worker_code_hash("pclab.experiments.clipping") != worker_code_hash(
        "pclab.experiments.negatives"
    )


def test_an_unknown_worker_is_refused():
    with pytest.raises(ValueError, match="worker="):
        worker_code_hash("pclab.no_such_module")


PROBE = """
import json
from pclab.experiments import registry
from pclab.runners.code_hash import worker_code_hash
from pclab.ui import downloads, runs
experiment = registry.get("clipping")
params = experiment.params()
result = experiment.run(params)
assert result.ok, result.message
record = downloads.run_record(result, {}, "clipping")
print(json.dumps({
    "hash": worker_code_hash(experiment.worker),
    "cache_key": list(runs.cache_key(experiment, params)),
    "record": record["worker_sha256"],
}))
"""


@pytest.mark.slow
def test_editing_a_core_module_changes_hash_cache_key_and_run_record(tmp_path):
    copy = tmp_path / "lab"
    copy.mkdir()
    shutil.copytree(ROOT / "pclab", copy / "pclab", ignore=shutil.ignore_patterns("__pycache__"))

    def probe() -> dict:
        done = subprocess.run(
            [sys.executable, "-c", PROBE], cwd=copy, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    before = probe()
    core = copy / "pclab" / "core" / "clipping.py"
    core.write_text(core.read_text() + "\n# an edit a server must not ignore\n")
    after = probe()
    assert before["record"] == before["hash"] and after["record"] == after["hash"]
    assert after["hash"] != before["hash"]
    assert after["cache_key"][1] != before["cache_key"][1]
    assert after["cache_key"][2] == before["cache_key"][2]  # same parameters


def test_sessions_reading_sources_at_once_never_trip_the_ast_constructor(tmp_path):
    """Eight Streamlit sessions pressing Run together hash their workers in eight threads.
    CPython 3.11's AST constructor keeps its recursion depth per interpreter, and a thread
    switch inside it (here forced by a garbage-collection callback, as Streamlit's own
    objects do) made one of them raise "SystemError: AST constructor recursion depth
    mismatch" on a hosted-demo round; parsing is serialised since."""
    import gc
    import threading
    import time

    from pclab.runners import code_hash

    body = (ROOT / "pclab" / "runners" / "run_queue.py").read_text() * 3
    files = []
    for i in range(8 * 10):  # fresh files: every call parses, none is served from the cache
        path = tmp_path / f"m{i}.py"
        path.write_text(body)
        files.append(path)
    errors: list[BaseException] = []

    def parse(share: list) -> None:
        for path in share:
            try:
                code_hash._named_modules(path, f"pkg.{path.stem}")
            except SystemError as error:
                errors.append(error)

    def switch(phase, info):
        time.sleep(0)

    gc.callbacks.append(switch)
    try:
        threads = [threading.Thread(target=parse, args=(files[i::8],)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.callbacks.remove(switch)
    assert errors == []


HASH_ALONE = """
import json, sys
from pclab.experiments.registry import EXPERIMENTS
from pclab.runners.code_hash import worker_code_hash
workers = [*EXPERIMENTS.values(), "bench.noop_worker"]
hashes = {worker: worker_code_hash(worker) for worker in workers}
print(json.dumps({"torch": sorted(n for n in sys.modules if n.split(".")[0] == "torch"),
                  "hashes": hashes}))
"""


def test_hashing_every_worker_never_imports_torch():
    """The command line, the server and the pool hash a worker before every launch: reading
    its sources must not import them (importlib.util.find_spec on `pkg.mod.name` imports
    `pkg.mod`, and with the experiments' modules torch: 1.4 s of `pclab run`)."""
    done = subprocess.run(
        [sys.executable, "-c", HASH_ALONE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["torch"] == []
    assert seen["hashes"]["pclab.experiments.transformer"] == worker_code_hash(
        "pclab.experiments.transformer"
    )


def _package(root: Path, core_text: str) -> None:
    (root / "hashpkg").mkdir(exist_ok=True)
    (root / "hashpkg" / "__init__.py").write_text("")
    (root / "hashpkg" / "worker.py").write_text("def main():\n    from .core import f\n")
    (root / "hashpkg" / "core.py").write_text(core_text)


def test_the_memoised_hash_follows_an_edit_in_the_same_process(tmp_path, monkeypatch):
    """The per-process memo is keyed on the files' stamps: a second call costs a stat per
    file, and an edit of an imported module (even one of the same size) changes the hash."""
    import os

    _package(tmp_path, "X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    files = source_files("hashpkg.worker")
    assert set(files) == {"hashpkg", "hashpkg.worker", "hashpkg.core"}
    first = worker_code_hash("hashpkg.worker")
    assert worker_code_hash("hashpkg.worker") == first
    core = tmp_path / "hashpkg" / "core.py"
    stamp = core.stat().st_mtime_ns
    core.write_text("X = 2\n")  # same size
    os.utime(core, ns=(stamp + 1_000_000, stamp + 1_000_000))
    second = worker_code_hash("hashpkg.worker")
    assert second != first
    (tmp_path / "hashpkg" / "extra.py").write_text("Y = 1\n")
    worker = tmp_path / "hashpkg" / "worker.py"
    worker.write_text(worker.read_text() + "    from . import extra\n")
    assert "hashpkg.extra" in source_files("hashpkg.worker")
    assert worker_code_hash("hashpkg.worker") not in (first, second)


NAMESPACE_WORKER = """
import json
from pclab.runners.code_hash import source_files
print(json.dumps(sorted(source_files("tests.runners.workers.sleeps"))))
"""


def test_a_worker_below_a_namespace_package_is_hashed_in_a_fresh_interpreter():
    """tests/runners has no __init__.py: the path finder reads a namespace parent's path from
    sys.modules, where nothing imported it (KeyError in every launch of a test worker, until
    a folder without __init__.py was taken to hold no source of its own)."""
    done = subprocess.run(
        [sys.executable, "-c", NAMESPACE_WORKER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(done.stdout))
    assert "tests.runners.workers.sleeps" in modules
    assert "pclab.runners.worker" in modules  # what the worker imports from the package


def test_the_statement_walk_finds_every_import_ast_walk_finds():
    """code_hash reads imports from statement bodies alone (they never sit in an expression):
    in every Python file of the checkout, the same import nodes as a walk of every node."""
    import ast

    from pclab.runners.code_hash import _import_statements

    checked = 0
    for path in sorted(ROOT.glob("**/*.py")):
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except SyntaxError:  # tests/trainers/syntax_error.py, on purpose
            continue
        walked = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        assert sorted(map(id, _import_statements(tree))) == sorted(map(id, walked)), path
        checked += 1
    assert checked > 300
