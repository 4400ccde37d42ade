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
no un-reaped child, no temporary directory, no run left in the test's own runtime. (The run
queue's own bookkeeping, with fake runs that start no process: tests/runners/test_run_queue.py.)
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time

import pytest
from runner_support import ROOT, children, marked
from streamlit.testing.v1 import AppTest

from pclab.runners import launcher
from pclab.runners.processes import GRACE_S
from pclab.runners.worker import TOKEN_ENV
from pclab.ui.plain_text import plain

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


def assert_nothing_left(mark, before, tmp, runtime):
    assert marked(mark) == [], "a process of the launch is still running"
    assert set(children()) - before == set(), "a child process was left (or not reaped)"
    assert list(tmp.glob("pcl-run-*")) == [], "a launch's temporary directory was left"
    assert runtime.run_queue.in_flight() == {"waiting": 0, "running": 0, "requesters": 0}


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
def test_killed_rank_is_named_with_its_signal(process_mark, private_tmp, runtime):
    before, reported, killed = set(children()), set(), []

    def progress(event):
        if event.event == "rank_done":
            reported.add(event.values["rank"])
        if reported == {0, 1} and not killed:  # both ranks are inside their collective loop
            pid = rank_pids(process_mark, LOOP)[1]
            os.kill(pid, signal.SIGKILL)
            killed.append(time.monotonic())

    args = ["--seconds", "120"]
    result = launcher.launch(LOOP, 2, args, timeout_s=200, progress=progress, runtime=runtime)
    assert killed, "the run ended before a rank could be killed"
    assert not result.ok and result.code == "failed"
    # rank 0 fails too (its all-reduce loses the peer) - a symptom, not the root cause
    assert result.message == "rank 1: killed by SIGKILL"
    FIGURES["kill: seconds from SIGKILL to a clean result"] = round(time.monotonic() - killed[0], 1)
    assert_nothing_left(process_mark, before, private_tmp, runtime)
    assert runtime.run_queue.stats["launched"] == 1


@pytest.mark.slow
def test_hung_rank_times_out_once_for_two_identical_requests(process_mark, private_tmp, runtime):
    before, results = set(children()), [None, None]

    def request(i: int) -> None:
        results[i] = launcher.launch(HANGS, 2, timeout_s=10, pg_timeout_s=600, runtime=runtime)

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
    assert runtime.run_queue.stats["launched"] == 1 and runtime.run_queue.stats["shared"] == 1
    FIGURES["hang: seconds from request to a clean timeout (limit 10 s)"] = round(elapsed, 1)
    assert_nothing_left(process_mark, before, private_tmp, runtime)


@pytest.mark.slow
def test_twelve_requests_at_once(process_mark, private_tmp, new_runtime):
    """8 identical + 4 different requests (5 distinct) on one slot and a line of one."""
    runtime = new_runtime(max_concurrent_runs=1, max_waiting_runs=1)
    before = set(children())
    tags = ["same"] * 8 + [f"other{i}" for i in range(4)]
    results, events = [None] * 12, [[] for _ in range(12)]
    gate = threading.Barrier(12)

    def request(i: int) -> None:
        gate.wait()
        args = ["--seconds", "0.5", "--tag", tags[i]]
        results[i] = launcher.launch(
            SLEEPS, 2, args, timeout_s=150, progress=events[i].append, runtime=runtime
        )

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
    counts = runtime.run_queue.stats
    assert counts["launched"] == 2 and counts["busy"] == len(busy)
    assert counts["shared"] == sum(r.ok for r in results) - 2
    FIGURES["12 requests: launches"] = counts["launched"]
    FIGURES["12 requests: answered by a shared run"] = counts["shared"]
    FIGURES["12 requests: busy"] = counts["busy"]
    FIGURES["12 requests: most torchrun jobs alive at once"] = table.max_jobs
    FIGURES["12 requests: most processes alive at once"] = table.max_processes
    FIGURES["12 requests: seconds until every answer"] = round(elapsed, 1)
    assert_nothing_left(process_mark, before, private_tmp, runtime)


@pytest.mark.slow
def test_stop_flag_ends_the_run_and_leaves_nothing(process_mark, private_tmp, runtime):
    before, stop, out, events = set(children()), threading.Event(), {}, []

    def request() -> None:
        out["result"] = launcher.launch(
            SLEEPS,
            2,
            ["--seconds", "120"],
            timeout_s=200,
            progress=events.append,
            cancel=stop,
            runtime=runtime,
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
    assert runtime.run_queue.stats["cancelled"] == 1
    FIGURES["stop flag: seconds until no process is left"] = round(cleanup, 2)
    assert_nothing_left(process_mark, before, private_tmp, runtime)


def streamlit_page():
    from pclab.ui.runs import run_with_status
    from tests.runners.workers import sleepy_runner

    run_with_status("sleepy", sleepy_runner.EXPERIMENT, seconds=120.0)


@pytest.mark.slow
def test_streamlit_stop_mid_run_leaves_no_orphans(process_mark, private_tmp):
    """AppTest stops a script that overruns its timeout with Streamlit's own stop request
    and waits for the script thread: only the page's heartbeat lets the stop reach a run
    (in the runtime the page's server holds, ui.serving's)."""
    from pclab.ui import runs, serving

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
    assert_nothing_left(process_mark, before, private_tmp, serving.runtime())


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
        assert plain("artifacts/tokenizer.json") in errors and "does not match" in errors
        at.button(key="exp_run").click().run()  # the run refuses before launching anything
        assert not at.exception, at.exception
        assert any(
            e.value.startswith("This run cannot start: The lab's own file")
            and plain("artifacts/tokenizer.json") in e.value
            for e in at.error
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


# ---------------------------------------------------------------- limits


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
