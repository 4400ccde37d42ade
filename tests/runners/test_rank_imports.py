"""What a rank imports of the lab when it starts: its experiment's worker and what that needs,
never the launching layer (launcher, run queue, runtime, warm pool, memory admission, code
hash, torchrun wrapper) nor the command line. Every cold launch and every `pclab check` pays a
rank's imports on each rank (issue 46); the launching process imports the rest.

Each registered experiment's `python -m <package>` is replayed in a fresh interpreter as a
rank starts it (RANK set, the package's __main__ run), with the worker's `main` replaced by a
no-op: what is then in sys.modules is what the rank imported before computing anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from runner_support import ROOT

from pclab.experiments import registry

LAUNCHING = {
    f"pclab.runners.{name}"
    for name in (
        "admission",
        "cli",
        "code_hash",
        "environment",
        "launcher",
        "processes",
        "run_queue",
        "runtime",
        "scratch",
        "warm_pool",
        "zygote",
    )
}
APP = ("streamlit", "pandas", "altair")

REPLAY = """
import importlib, json, runpy, sys
package = sys.argv[1]
worker = importlib.import_module(package + ".worker")
worker.main = lambda *args, **kwargs: None  # the imports of a rank's start, not its work
runpy.run_module(package + ".__main__", run_name="__main__")
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("name", registry.names())
def test_a_rank_imports_no_launching_layer_and_no_command_line(name):
    package = registry.EXPERIMENTS[name]
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", REPLAY, package],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert f"{package}.worker" in modules
    assert modules & LAUNCHING == set()
    assert f"{package}.cli" not in modules
    assert "pclab.experiments.command" in modules  # __main__'s entry: the rank branch ran
    assert [m for m in modules if m.split(".")[0] in APP] == []
