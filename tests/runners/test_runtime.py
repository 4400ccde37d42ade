"""The runtime (runners/runtime.py): no hidden state. Importing the launching layer registers,
starts and remembers nothing; a Runtime registers its exit handler when it is built and
removes it at shutdown; a launch given no runtime builds a fresh one and leaves nothing
behind; two runtimes share nothing (each test and the server hold their own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from runner_support import ROOT

from pclab.runners.results import Outcome, RunResult
from pclab.runners.runtime import Runtime, given_or_fresh
from pclab.runners.settings import Settings

# Run in a fresh interpreter: what the imports themselves do, before anything else did it.
# Exit handlers are counted as registered minus unregistered (atexit keeps no public list).
IMPORTS_THEN_LAUNCH = """
import atexit, importlib, json, os, pkgutil, sys, threading, time

handlers = []
register, unregister = atexit.register, atexit.unregister
def counted_register(func, *args, **kwargs):
    handlers.append(func)
    return register(func, *args, **kwargs)
def counted_unregister(func):
    handlers[:] = [h for h in handlers if h != func]
    unregister(func)
atexit.register, atexit.unregister = counted_register, counted_unregister

def state():
    from pclab.runners.memory import children
    return {"atexit": len(handlers), "threads": threading.active_count(),
            "children": len(children(os.getpid()))}

out = {"before": state()}
import pclab.runners
for found in pkgutil.iter_modules(pclab.runners.__path__):
    importlib.import_module(f"pclab.runners.{found.name}")
import pclab.experiments.registry  # every experiment, as the CLI and the server import them
out["imported"] = state()
from pclab.runners.runtime import Runtime
from pclab.runners.settings import Settings
runtime = Runtime.start(Settings())
out["built"] = state()
runtime.shutdown()
out["shut_down"] = state()
from pclab.runners import launcher
result = launcher.launch("bench.noop_worker", 2, timeout_s=120)  # no runtime given
deadline = time.monotonic() + 5  # the run's thread ends just after its answer
while threading.active_count() > out["before"]["threads"] and time.monotonic() < deadline:
    time.sleep(0.05)
out["launched"] = {**state(), "ok": result.ok}
print(json.dumps(out))
"""


def test_importing_registers_nothing_until_a_runtime_is_built():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PCL_")}
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_THEN_LAUNCH],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    before = out["before"]
    assert out["imported"] == before  # no exit handler, no thread, no process
    assert out["built"] == {**before, "atexit": before["atexit"] + 1}  # its own handler
    assert out["shut_down"] == before
    assert out["launched"] == {**before, "ok": True}  # a fresh runtime came and went


def test_a_runtime_registers_its_exit_handler_when_built_and_removes_it_at_shutdown(monkeypatch):
    import atexit

    handlers = []
    monkeypatch.setattr(atexit, "register", handlers.append)
    monkeypatch.setattr(atexit, "unregister", handlers.remove)
    runtime = Runtime.start(Settings())
    assert handlers == [runtime.shutdown]
    runtime.shutdown()
    assert handlers == []
    assert runtime.pool.broken() == "the warm pool was shut down"


def _held_until(gate: threading.Event):
    """A fake run that finishes when `gate` is set, or ends cancelled when asked to."""

    def work(run):
        while not gate.wait(0.02):
            if run.cancelled():
                return RunResult.ended(Outcome.CANCELLED, "stopped", 0.0, "f")
        return RunResult.finished(({"rank": 0},), 0.0, "f")

    return work


def test_two_runtimes_share_nothing(new_runtime):
    """The same request in two runtimes runs twice: each has its own line and counters."""
    gate, results = threading.Event(), {}
    first, second = new_runtime(), new_runtime()

    def request(runtime, name):
        results[name] = runtime.run_queue.submit(
            "same", _held_until(gate), timeout_s=30, worker_hash="f"
        )

    threads = [
        threading.Thread(target=request, args=(runtime, name))
        for runtime, name in ((first, "first"), (second, "second"))
    ]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(10)
    assert results["first"].ok and results["second"].ok
    assert results["first"] is not results["second"]
    assert first.run_queue.stats["launched"] == second.run_queue.stats["launched"] == 1
    assert first.run_queue.stats["shared"] == second.run_queue.stats["shared"] == 0


def test_shutdown_cancels_what_runs(new_runtime):
    runtime, gate, out = new_runtime(), threading.Event(), {}

    def request():
        out["result"] = runtime.run_queue.submit(
            "held", _held_until(gate), timeout_s=30, worker_hash="f"
        )

    thread = threading.Thread(target=request)
    thread.start()
    while runtime.run_queue.in_flight()["running"] == 0:
        thread.join(0.01)
    runtime.shutdown()
    thread.join(10)
    assert out["result"].code == "cancelled"
    assert runtime.run_queue.in_flight() == {"waiting": 0, "running": 0, "requesters": 0}


def test_a_given_runtime_is_used_as_it_is_and_a_missing_one_is_fresh(runtime, monkeypatch):
    with given_or_fresh(runtime) as used:
        assert used is runtime
    monkeypatch.setenv("PCL_MAX_WAITING_RUNS", "3")
    with given_or_fresh(None) as fresh:
        assert fresh is not runtime and fresh.settings.max_waiting_runs == 3
    assert fresh.pool.broken() == "the warm pool was shut down"  # shut down after the block
