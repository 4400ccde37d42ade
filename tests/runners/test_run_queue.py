"""The run queue (runners/run_queue.py, its policy runners/admission.py) with fake runs that
start no process: identical requests share one run, distinct ones wait in the queue first come
first served and hear their place, a full queue answers "busy" at once, the last requester to
leave cancels the run, and a raising progress callback stops it and goes on. Each test builds
its own runtime's run queue (conftest's `new_runtime`); the memory budget's part:
tests/runners/test_memory.py; real launches under faults: tests/runners/test_faults.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from pclab.runners.results import Outcome, RunResult
from pclab.runners.run_queue import QueuedRun


@pytest.fixture
def run_queue(runtime):
    """The run queue of a cold runtime of this test's own, at the default settings."""
    return runtime.run_queue


def fake_work(gate: threading.Event, calls: list):
    def work(run: QueuedRun) -> RunResult:
        calls.append(run.key)
        run.say("start", "fake start", world_size=1, worker="fake")
        while not gate.wait(0.02):
            if run.cancelled():
                return RunResult.ended(Outcome.CANCELLED, "stopped", 0.0, "f")
        return RunResult.finished(({"key": run.key},), 0.0, "f")

    return work


def test_identical_requests_arriving_together_share_a_result_that_ends_past_their_limit(run_queue):
    """Two identical requests with the same limit reach the registry while it is busy, so
    both read the clock before either creates the run. The joiner still waits for the run's
    own ending (its limit plus cleanup), which here comes after the limit, as a timeout's
    does: it must not leave at its own limit with a result of its own (CI saw this once in
    the real hung-rank test of test_faults.py)."""

    def work(run: QueuedRun) -> RunResult:
        time.sleep(run.timeout_s + 0.4)  # stopping the processes outlives the limit itself
        return RunResult.ended(Outcome.TIMEOUT, "timed out after 0.5 s", 0.9, "f")

    results: dict[int, RunResult] = {}

    def request(i: int) -> None:
        results[i] = run_queue.submit("arrive-together", work, timeout_s=0.5, worker_hash="f")

    threads = [threading.Thread(target=request, args=(i,)) for i in range(2)]
    with run_queue._lock:  # both requests wait here, after their first statement
        for thread in threads:
            thread.start()
        time.sleep(0.2)
    for thread in threads:
        thread.join(10)
    assert results[0] is results[1], (results[0].message, results[1].message)
    assert results[0].message == "timed out after 0.5 s"
    assert run_queue.stats["launched"] == 1 and run_queue.stats["shared"] == 1


def submit_in_thread(run_queue, key, work, out, name=None, **kwargs):
    """run_queue.submit(key, work) in a new thread; its RunResult lands in out[name or key]."""

    def target():
        try:
            out[name or key] = run_queue.submit(key, work, timeout_s=30, worker_hash="f", **kwargs)
        except Exception as exc:  # recorded for the assertion
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def wait_for(condition, seconds=30.0):  # threads handing work on: beside busy cores, slow
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.01)


def test_queue_positions_busy_and_sharing(new_runtime):
    run_queue = new_runtime(max_concurrent_runs=1, max_waiting_runs=2).run_queue
    gates = {k: threading.Event() for k in "abc"}
    calls, out, seen = [], {}, {k: [] for k in ("a", "b", "c", "b2")}
    threads = [
        submit_in_thread(
            run_queue, "a", fake_work(gates["a"], calls), out, progress=seen["a"].append
        )
    ]
    wait_for(lambda: calls == ["a"])
    threads.append(
        submit_in_thread(
            run_queue, "b", fake_work(gates["b"], calls), out, progress=seen["b"].append
        )
    )
    wait_for(lambda: run_queue.in_flight()["waiting"] == 1)
    threads.append(
        submit_in_thread(
            run_queue, "c", fake_work(gates["c"], calls), out, progress=seen["c"].append
        )
    )
    wait_for(lambda: run_queue.in_flight()["waiting"] == 2)
    # an identical request joins b in the queue instead of being refused
    joined = submit_in_thread(
        run_queue, "b", fake_work(gates["b"], calls), out, progress=seen["b2"].append, name="b2"
    )
    wait_for(lambda: len(seen["b2"]) >= 2)
    assert [e.event for e in seen["b2"][:2]] == ["shared", "queued"]
    busy_events = []
    refused = run_queue.submit(
        "d",
        fake_work(threading.Event(), calls),
        timeout_s=30,
        worker_hash="f",
        progress=busy_events.append,
    )
    assert refused.code == "busy" and [e.event for e in busy_events] == ["busy"]
    gates["a"].set()  # a finishes, b starts: c moves up to the front of the queue
    wait_for(lambda: [e.values["position"] for e in seen["c"] if e.event == "queued"] == [2, 1])
    gates["b"].set()
    gates["c"].set()
    for thread in [*threads, joined]:
        thread.join(10)
    assert calls == ["a", "b", "c"]  # first come, first served; "b" ran once for two requests
    assert out["b"] is out["b2"] and out["b"].ok and out["c"].ok
    assert [e.values["position"] for e in seen["b"] if e.event == "queued"] == [1]


def test_the_last_requester_leaving_cancels_the_run(run_queue):
    gate, calls, out = threading.Event(), [], {}
    stop_one, stop_two = threading.Event(), threading.Event()
    work = fake_work(gate, calls)
    first = submit_in_thread(run_queue, "k", work, out, cancel=stop_one)
    wait_for(lambda: calls == ["k"])
    second = submit_in_thread(run_queue, "k", work, out, cancel=stop_two, name="k2")
    wait_for(lambda: run_queue.in_flight()["requesters"] == 2)
    stop_one.set()  # one visitor presses Stop: the other still waits, so the run goes on
    first.join(5)
    assert out["k"].code == "cancelled"
    assert run_queue.in_flight() == {"waiting": 0, "running": 1, "requesters": 1}
    stop_two.set()  # the last one leaves: the run itself is cancelled and finished
    second.join(5)
    assert out["k2"].code == "cancelled" and run_queue.in_flight()["running"] == 0
    assert "error" not in out and run_queue.stats["cancelled"] == 1


def test_a_raising_progress_callback_stops_the_run_and_propagates(run_queue):
    gate, calls = threading.Event(), []

    class Stopped(Exception):
        pass

    def progress(event):
        raise Stopped

    with pytest.raises(Stopped):
        run_queue.submit(
            "r", fake_work(gate, calls), timeout_s=30, worker_hash="f", progress=progress
        )
    assert calls == ["r"] and run_queue.in_flight()["running"] == 0
