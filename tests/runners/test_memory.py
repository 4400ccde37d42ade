"""The memory budget (runners/memory.py): what a runtime counts as the lab's tree (this process
and the roots it watches, with their descendants, by PSS), checked against memory a child
process is known to hold; and the run queue's use of it - a run that would go past the budget
waits while another runs, or is refused at once when nothing runs (nothing is killed)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

from pclab.runners import launcher
from pclab.runners.memory import MemoryBudget, descendants
from pclab.runners.results import Outcome, RunResult

HELD_MB = 200
# A child that writes HELD_MB of its own bytes (every page touched), says so, and waits; its
# own grandchild sleeps, to see descendants counted too.
HOLDER = (
    "import subprocess, sys\n"
    f"held = b'x' * ({HELD_MB} * 2**20)\n"
    "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print(grandchild.pid, flush=True)\n"
    "sys.stdin.read()\n"
    "grandchild.kill()\n"
)


def test_a_watched_process_and_its_descendants_count_and_others_do_not():
    budget = MemoryBudget(2500)
    assert budget.lab_pids() == [os.getpid()]  # nothing watched: this process alone
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        grandchild = int(holder.stdout.readline())
        alone = budget.lab_mb()
        assert budget.lab_pids() == [os.getpid()]  # a child of a test is not the lab's
        budget.watch(holder.pid)
        assert budget.lab_pids() == [os.getpid(), holder.pid, grandchild]
        assert descendants(holder.pid) == [grandchild]
        grown = budget.lab_mb() - alone
        # its bytes, plus an interpreter or two of a few MB each (PSS: shared pages split)
        assert HELD_MB - 5 <= grown <= HELD_MB + 60, grown
        budget.unwatch(holder.pid)
        assert budget.lab_pids() == [os.getpid()]
    finally:
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()


def test_a_recent_reading_is_reused_and_an_old_one_is_not(monkeypatch):
    budget = MemoryBudget(2500)
    measured = []
    monkeypatch.setattr(budget, "lab_pids", lambda: measured.append(1) or [os.getpid()])
    first = budget.lab_mb()
    assert budget.lab_mb(max_age_s=60) == first and len(measured) == 1
    budget.lab_mb()  # max_age_s 0: measured again
    assert len(measured) == 2


def _finished(seconds: float):
    def work(run):
        time.sleep(seconds)
        return RunResult.finished(({"rank": 0},), seconds, "f" * 64)

    return work


def test_over_budget_with_nothing_running_is_refused_at_once(new_runtime):
    runtime = new_runtime(memory_budget_mb=64)  # less than this test process alone
    events = []
    began = time.monotonic()
    result = launcher.launch(
        "bench.noop_worker", 2, timeout_s=60, progress=events.append, runtime=runtime
    )
    assert time.monotonic() - began < 5
    assert result.outcome is Outcome.BUSY and "memory budget" in result.message
    assert runtime.run_queue.stats["launched"] == 0  # nothing was started
    (busy,) = events
    assert busy.event == "busy" and busy.values["reason"] == "memory"
    assert busy.values["budget_mb"] == 64 and busy.values["used_mb"] > 0


def test_a_run_waits_for_memory_while_another_runs_then_starts(new_runtime):
    """Two free slots, room for one run's estimate: the second waits in the queue ("memory")
    until the first ends, then runs; neither is refused."""
    budget = math.ceil(MemoryBudget(2500).lab_mb()) + 300
    run_queue = new_runtime(memory_budget_mb=budget, max_concurrent_runs=2).run_queue
    ended, events, results = {}, [], {}

    def first_work(run):
        result = _finished(1.5)(run)
        ended["first"] = time.monotonic()  # its work's end: its requester may hear it later
        return result

    def second_work(run):
        ended["second began"] = time.monotonic()
        return _finished(0.1)(run)

    def first():
        results["first"] = run_queue.submit(
            ("mem-test", 1), first_work, timeout_s=60, worker_hash="f" * 64, memory_mb=200
        )

    thread = threading.Thread(target=first)
    thread.start()
    deadline = time.monotonic() + 5
    while run_queue.in_flight()["running"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    second = run_queue.submit(
        ("mem-test", 2),
        second_work,
        timeout_s=60,
        worker_hash="f" * 64,
        memory_mb=200,
        progress=events.append,
    )
    thread.join()
    assert results["first"].ok and second.ok
    memory_events = [e for e in events if e.event == "memory"]
    assert len(memory_events) == 1 and memory_events[0].values["budget_mb"] == budget
    assert ended["second began"] >= ended["first"]  # it ran after the first had ended
    assert run_queue.stats["launched"] == 2 and run_queue.stats["busy"] == 0
