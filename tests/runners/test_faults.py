"""Fault injection: runs under load and faults, with real torchrun launches of tiny workers.

    kill one rank mid-run    SIGKILL from outside (pid found in /proc): the result names the
                             rank and the signal, not its peer's lost connection
    hang one rank            two identical requests share one launch; both get the timeout
    12 requests at once      8 identical + 4 different: never more torchrun jobs alive than
                             configured (sampled in /proc), one launch per distinct request,
                             a place in line or an immediate "busy" for the rest
    Stop                     a cancel flag, and Streamlit's own stop of a script mid-run
    tampered artifact        the experiment page shows the error and stays usable

After every fault: no process of the launch (found by an inherited environment mark),
no un-reaped child, no temporary directory. The registry's bookkeeping (positions, busy,
leaving) is also checked with fake jobs that start no process at all.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter

import pytest
from runner_support import ROOT, children, marked, use_settings
from streamlit.testing.v1 import AppTest

from pclab.runners import jobs, launcher, settings
from pclab.runners.processes import GRACE_S, TOKEN_ENV
from pclab.runners.results import Outcome, RunResult

SLEEPS = "tests.runners.workers.sleeps"
LOOP = "tests.runners.workers.collective_loop"
HANGS = "tests.runners.workers.hangs"
FIGURES: dict[str, object] = {}  # measured figures, printed at the end (pytest -s) for the README


@pytest.fixture(scope="module", autouse=True)
def print_figures():
    yield
    for name, value in FIGURES.items():
        print(f"\nFIGURE {name}: {value}")


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Route the launcher's temporary directories here, to see that they are removed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.fixture
def stats():
    """The registry's counters as a delta over this test."""
    before = Counter(jobs.STATS)
    return lambda: Counter({k: jobs.STATS[k] - before[k] for k in jobs.STATS if k != "max_running"})


def assert_nothing_left(mark, before, tmp):
    assert marked(mark) == [], "a process of the launch is still running"
    assert set(children()) - before == set(), "a child process was left (or not reaped)"
    assert list(tmp.glob("pcl-run-*")) == [], "a launch's temporary directory was left"
    assert jobs.in_flight() == {"waiting": 0, "running": 0, "requesters": 0}


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def rank_pids(mark: str, worker: str) -> dict[int, int]:
    """rank -> pid of the worker processes of a launch (torchrun itself has no RANK)."""
    out = {}
    for pid in marked(mark):
        if worker.encode() in cmdline(pid) and b"torch.distributed.run" not in cmdline(pid):
            rank = [e for e in environ(pid) if e.startswith(b"RANK=")]
            if rank:
                out[int(rank[0][5:])] = pid
    return out


class ProcessTable(threading.Thread):
    """Samples /proc every 20 ms: the most launches (distinct launch tokens) alive at once."""

    def __init__(self, mark: str) -> None:
        super().__init__(daemon=True)
        self.mark, self.stop, self.max_jobs, self.max_processes, self.samples = mark, False, 0, 0, 0

    def run(self) -> None:
        prefix = f"{TOKEN_ENV}=".encode()
        while not self.stop:
            pids = marked(self.mark)
            tokens = {e for p in pids for e in environ(p) if e.startswith(prefix)}
            self.max_jobs = max(self.max_jobs, len(tokens))
            self.max_processes = max(self.max_processes, len(pids))
            self.samples += 1
            time.sleep(0.02)

    def __enter__(self) -> ProcessTable:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop = True
        self.join()


# ---------------------------------------------------------------- real launches


@pytest.mark.slow
def test_killed_rank_is_named_with_its_signal(process_mark, private_tmp, stats):
    before, reported, killed = set(children()), set(), []

    def progress(event):
        if event.event == "rank_done":
            reported.add(event.values["rank"])
        if reported == {0, 1} and not killed:  # both ranks are inside their collective loop
            pid = rank_pids(process_mark, LOOP)[1]
            os.kill(pid, signal.SIGKILL)
            killed.append(time.monotonic())

    result = launcher.launch(LOOP, 2, ["--seconds", "120"], timeout_s=200, progress=progress)
    assert killed, "the run ended before a rank could be killed"
    assert not result.ok and result.code == "failed"
    # rank 0 fails too (its all-reduce loses the peer) - a symptom, not the root cause
    assert result.message == "rank 1: killed by SIGKILL"
    FIGURES["kill: seconds from SIGKILL to a clean result"] = round(time.monotonic() - killed[0], 1)
    assert_nothing_left(process_mark, before, private_tmp)
    assert stats()["launched"] == 1


@pytest.mark.slow
def test_hung_rank_times_out_once_for_two_identical_requests(process_mark, private_tmp, stats):
    before, results = set(children()), [None, None]

    def request(i: int) -> None:
        results[i] = launcher.launch(HANGS, 2, timeout_s=10, pg_timeout_s=600)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(2)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    elapsed = time.monotonic() - began
    assert results[0] is results[1], "identical requests must share one RunResult"
    result = results[0]
    assert not result.ok and result.code == "timeout"
    assert (
        result.message.startswith("timed out after 10 s (rank")
        and "1" in result.message.split("(")[1]
    )
    assert elapsed < 10 + 3 * GRACE_S + 2
    assert stats()["launched"] == 1 and stats()["shared"] == 1
    FIGURES["hang: seconds from request to a clean timeout (limit 10 s)"] = round(elapsed, 1)
    assert_nothing_left(process_mark, before, private_tmp)


@pytest.mark.slow
def test_twelve_requests_at_once(process_mark, private_tmp, stats, monkeypatch):
    """8 identical + 4 different requests (5 distinct) on one slot and a line of one."""
    use_settings(monkeypatch, max_concurrent_runs=1, max_waiting_runs=1)
    before = set(children())
    tags = ["same"] * 8 + [f"other{i}" for i in range(4)]
    results, events = [None] * 12, [[] for _ in range(12)]
    gate = threading.Barrier(12)

    def request(i: int) -> None:
        gate.wait()
        args = ["--seconds", "0.5", "--tag", tags[i]]
        results[i] = launcher.launch(SLEEPS, 2, args, timeout_s=150, progress=events[i].append)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(12)]
    began = time.monotonic()
    with ProcessTable(process_mark) as table:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(150)
    elapsed = time.monotonic() - began

    assert all(r is not None for r in results), "a request got no answer"
    assert (
        table.samples > 50 and table.max_jobs == 1
    )  # torchrun + its 2 ranks, one launch at a time
    by_tag: dict[str, set] = {}
    for tag, result in zip(tags, results, strict=True):
        if result.ok:
            assert {r["tag"] for r in result.ranks} == {tag}
            by_tag.setdefault(tag, set()).add(tuple(r["pid"] for r in result.ranks))
        else:
            assert result.code == "busy" and "try again shortly" in result.message, result
            assert result.seconds == 0.0
    # One slot plus a line of one: two distinct requests run, three are turned away at once.
    assert len(by_tag) == 2 and all(len(pids) == 1 for pids in by_tag.values()), by_tag
    busy = [r for r in results if not r.ok]
    assert len({t for t, r in zip(tags, results, strict=True) if not r.ok}) == 3
    positions = {e.values["position"] for evs in events for e in evs if e.event == "queued"}
    assert positions == {1}
    assert [e.event for i, evs in enumerate(events) if not results[i].ok for e in evs] == [
        "busy"
    ] * len(busy)
    counts = stats()
    assert counts["launched"] == 2 and counts["busy"] == len(busy)
    assert counts["shared"] == sum(r.ok for r in results) - 2
    FIGURES["12 requests: launches"] = counts["launched"]
    FIGURES["12 requests: answered by a shared run"] = counts["shared"]
    FIGURES["12 requests: busy"] = counts["busy"]
    FIGURES["12 requests: most torchrun jobs alive at once"] = table.max_jobs
    FIGURES["12 requests: most processes alive at once"] = table.max_processes
    FIGURES["12 requests: seconds until every answer"] = round(elapsed, 1)
    assert_nothing_left(process_mark, before, private_tmp)


@pytest.mark.slow
def test_stop_flag_ends_the_run_and_leaves_nothing(process_mark, private_tmp, stats):
    before, stop, out, events = set(children()), threading.Event(), {}, []

    def request() -> None:
        out["result"] = launcher.launch(
            SLEEPS, 2, ["--seconds", "120"], timeout_s=200, progress=events.append, cancel=stop
        )

    thread = threading.Thread(target=request)
    thread.start()
    deadline = time.monotonic() + 60
    while len(rank_pids(process_mark, SLEEPS)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(rank_pids(process_mark, SLEEPS)) == 2, "the ranks never started"
    pressed = time.monotonic()
    stop.set()
    thread.join(30)
    cleanup = time.monotonic() - pressed
    assert out["result"].code == "cancelled" and not out["result"].ok
    assert events[-1].event == "cancelled"
    assert cleanup < 2 * GRACE_S + 1
    assert stats()["cancelled"] == 1
    FIGURES["stop flag: seconds until no process is left"] = round(cleanup, 2)
    assert_nothing_left(process_mark, before, private_tmp)


def streamlit_page():
    from pclab.ui.runs import run_with_status
    from tests.runners.workers import sleepy_runner

    run_with_status("sleepy", sleepy_runner.EXPERIMENT, seconds=120.0)


@pytest.mark.slow
def test_streamlit_stop_mid_run_leaves_no_orphans(process_mark, private_tmp):
    """AppTest stops a script that overruns its timeout with Streamlit's own stop request
    and waits for the script thread: only the page's heartbeat lets the stop reach a run."""
    from pclab.ui import runs

    runs.clear()
    before = set(children())
    at = AppTest.from_function(streamlit_page, default_timeout=8)
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out"):
        at.run()
    after_stop = time.monotonic() - began - 8
    assert after_stop < GRACE_S + 2 * runs.HEARTBEAT_S + 1
    FIGURES["Streamlit stop: seconds from the stop request to the script's end"] = round(
        after_stop, 2
    )
    assert_nothing_left(process_mark, before, private_tmp)


# ---------------------------------------------------------------- what a visitor sees


def visitor_page():
    import streamlit as st

    from pclab.ui.runs import run_with_status
    from tests.runners.workers import fake_runner

    busy = st.checkbox("busy", key="busy")
    result = run_with_status("demo", fake_runner.FAKE, busy=busy, position=2)
    st.text("none" if result is None else f"ok={result.ok} code={result.code}")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_visitor_sees_the_place_in_line_and_a_busy_answer(lang):
    from pclab.ui import i18n, runs
    from tests.runners.workers import fake_runner

    runs.clear()
    fake_runner.CALLS.clear()
    at = AppTest.from_function(visitor_page, default_timeout=30)
    at.session_state["lang"] = lang
    at.run()
    assert not at.exception
    lines = "\n".join(m.value for m in at.markdown)
    assert i18n.text(lang, "runs.progress.queued", position=2, running=1) in lines
    assert at.text[0].value == "ok=True code="
    at.checkbox(key="busy").check().run()
    assert not at.exception and at.text[0].value == "ok=False code=busy"
    assert at.warning[0].value == i18n.text(lang, "runs.busy") and not at.error
    at.run()  # a busy answer is never stored: the next press asks again
    assert len(fake_runner.CALLS) == 3


# ---------------------------------------------------------------- a tampered artifact, on the page


def test_tampered_artifact_shows_an_error_and_the_page_recovers(tmp_path, monkeypatch):
    import streamlit as st

    from pclab.experiments.transformer.lm import artifacts, data

    for name in (
        "artifacts/manifest.json",
        "artifacts/tokenizer.json",
        "corpus/en.md",
        "corpus/zh.md",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "pclab" / name, tmp_path / name)
    tokenizer = tmp_path / "artifacts" / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes()[:-100])  # truncated
    verified = artifacts.verified_bytes

    def fresh() -> None:
        data.committed_tokenizer.cache_clear()
        st.cache_resource.clear()

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    try:
        fresh()
        monkeypatch.setattr(
            artifacts, "verified_bytes", lambda name, root=None: verified(name, tmp_path)
        )
        at.switch_page("pclab/sections/experiment.py").run()
        assert not at.exception, at.exception
        errors = " ".join(e.value for e in at.error)
        assert "artifacts/tokenizer.json" in errors and "does not match" in errors
        at.button(key="exp_run").click().run()  # the run refuses before launching anything
        assert not at.exception, at.exception
        assert any(
            e.value.startswith("This run cannot start: artifacts/tokenizer.json") for e in at.error
        )
        assert (
            "exp_run_result" in at.session_state and at.session_state["exp_run_result"][1] is None
        )
    finally:
        monkeypatch.undo()
        fresh()
    at.run()  # the same session, artifacts intact again: the page works
    assert not at.exception and not at.error
    assert len(at.number_input) >= 4


# ---------------------------------------------------------------- the registry, with fake jobs


def fake_work(gate: threading.Event, calls: list):
    def work(job: jobs.Job) -> RunResult:
        calls.append(job.key)
        job.say("start", "fake start", world_size=1, worker="fake")
        while not gate.wait(0.02):
            if job.cancelled():
                return RunResult.ended(Outcome.CANCELLED, "stopped", 0.0, "f")
        return RunResult.finished(({"key": job.key},), 0.0, "f")

    return work


def test_identical_requests_arriving_together_share_a_result_that_ends_past_their_limit(stats):
    """Two identical requests with the same limit reach the registry while it is busy, so
    both read the clock before either creates the job. The joiner still waits for the job's
    own ending (its limit plus cleanup), which here comes after the limit, as a timeout's
    does: it must not leave at its own limit with a result of its own (CI saw this once in
    the real hung-rank test above)."""

    def work(job: jobs.Job) -> RunResult:
        time.sleep(job.timeout_s + 0.4)  # stopping the processes outlives the limit itself
        return RunResult.ended(Outcome.TIMEOUT, "timed out after 0.5 s", 0.9, "f")

    results: dict[int, RunResult] = {}

    def request(i: int) -> None:
        results[i] = jobs.submit("arrive-together", work, timeout_s=0.5, worker_hash="f")

    threads = [threading.Thread(target=request, args=(i,)) for i in range(2)]
    with jobs._LOCK:  # both requests wait here, after their first line
        for thread in threads:
            thread.start()
        time.sleep(0.2)
    for thread in threads:
        thread.join(10)
    assert results[0] is results[1], (results[0].message, results[1].message)
    assert results[0].message == "timed out after 0.5 s"
    assert stats()["launched"] == 1 and stats()["shared"] == 1


def submit_in_thread(key, work, out, name=None, **kwargs):
    """jobs.submit(key, work) in a new thread; its RunResult lands in out[name or key]."""

    def target():
        try:
            out[name or key] = jobs.submit(key, work, timeout_s=30, worker_hash="f", **kwargs)
        except Exception as exc:  # recorded for the assertion
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.01)


def test_line_positions_busy_and_sharing(monkeypatch):
    use_settings(monkeypatch, max_concurrent_runs=1, max_waiting_runs=2)
    gates = {k: threading.Event() for k in "abc"}
    calls, out, seen = [], {}, {k: [] for k in ("a", "b", "c", "b2")}
    threads = [submit_in_thread("a", fake_work(gates["a"], calls), out, progress=seen["a"].append)]
    wait_for(lambda: calls == ["a"])
    threads.append(
        submit_in_thread("b", fake_work(gates["b"], calls), out, progress=seen["b"].append)
    )
    wait_for(lambda: jobs.in_flight()["waiting"] == 1)
    threads.append(
        submit_in_thread("c", fake_work(gates["c"], calls), out, progress=seen["c"].append)
    )
    wait_for(lambda: jobs.in_flight()["waiting"] == 2)
    # an identical request joins b in line instead of being refused
    joined = submit_in_thread(
        "b", fake_work(gates["b"], calls), out, progress=seen["b2"].append, name="b2"
    )
    wait_for(lambda: len(seen["b2"]) >= 2)
    assert [e.event for e in seen["b2"][:2]] == ["shared", "queued"]
    busy_events = []
    refused = jobs.submit(
        "d",
        fake_work(threading.Event(), calls),
        timeout_s=30,
        worker_hash="f",
        progress=busy_events.append,
    )
    assert refused.code == "busy" and [e.event for e in busy_events] == ["busy"]
    gates["a"].set()  # a finishes, b starts: c moves up to the front of the line
    wait_for(lambda: [e.values["position"] for e in seen["c"] if e.event == "queued"] == [2, 1])
    gates["b"].set()
    gates["c"].set()
    for thread in [*threads, joined]:
        thread.join(10)
    assert calls == ["a", "b", "c"]  # first come, first served; "b" ran once for two requests
    assert out["b"] is out["b2"] and out["b"].ok and out["c"].ok
    assert [e.values["position"] for e in seen["b"] if e.event == "queued"] == [1]


def test_the_last_requester_leaving_cancels_the_job():
    gate, calls, out = threading.Event(), [], {}
    stop_one, stop_two = threading.Event(), threading.Event()
    work = fake_work(gate, calls)
    first = submit_in_thread("k", work, out, cancel=stop_one)
    wait_for(lambda: calls == ["k"])
    second = submit_in_thread("k", work, out, cancel=stop_two, name="k2")
    wait_for(lambda: jobs.in_flight()["requesters"] == 2)
    stop_one.set()  # one visitor presses Stop: the other still waits, so the run goes on
    first.join(5)
    assert out["k"].code == "cancelled"
    assert jobs.in_flight() == {"waiting": 0, "running": 1, "requesters": 1}
    stop_two.set()  # the last one leaves: the job itself is cancelled and finished
    second.join(5)
    assert out["k2"].code == "cancelled" and jobs.in_flight()["running"] == 0
    assert "error" not in out


def test_a_raising_progress_callback_stops_the_job_and_propagates():
    gate, calls = threading.Event(), []

    class Stopped(Exception):
        pass

    def progress(event):
        raise Stopped

    with pytest.raises(Stopped):
        jobs.submit("r", fake_work(gate, calls), timeout_s=30, worker_hash="f", progress=progress)
    assert calls == ["r"] and jobs.in_flight()["running"] == 0


@pytest.mark.parametrize(
    "name, value",
    [
        ("PCL_MAX_CONCURRENT_RUNS", "many"),
        ("PCL_MAX_CONCURRENT_RUNS", "0"),
        ("PCL_MAX_WAITING_RUNS", "-4"),
        ("PCL_WARM_POOL", "maybe"),
        ("PCL_PG_TIMEOUT_S", "nan"),
    ],
)
def test_malformed_settings_are_refused_naming_the_variable(name, value):
    with pytest.raises(ValueError, match=name):
        settings.from_env({name: value})


def test_settings_are_read_from_the_environment():
    read = settings.from_env({"PCL_MAX_CONCURRENT_RUNS": " 3 ", "PCL_PRELOAD": "off"})
    assert read.max_concurrent_runs == 3 and read.preload is False
    assert settings.from_env({}) == settings.Settings()
    assert settings.current().max_concurrent_runs >= 1 and settings.current().max_waiting_runs >= 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout_s": 3601},
        {"pg_timeout_s": float("nan")},
        {"args": ["x"] * 300},
        {"args": ["a\0b"]},
    ],
)
def test_launch_limits_are_checked_before_anything_starts(kwargs, process_mark):
    with pytest.raises(ValueError):
        launcher.launch(SLEEPS, 2, **{"args": [], **kwargs})
    assert marked(process_mark) == []
