"""The hosted demo's defaults: warm runs in the server without a setting, cold for CLIs and
tests, torchrun as the fallback when the pool cannot start (said as an event), and the memory
budget of the server's whole process tree (a run waits or is refused; nothing is killed)."""

from __future__ import annotations

import math
import threading
import time

import pytest
from runner_support import ROOT, use_settings
from streamlit.testing.v1 import AppTest

from pclab.runners import jobs, launcher, memory, settings, warm_pool
from pclab.runners.results import Outcome, RunResult

ROOT_APP = str(ROOT / "app.py")


# ---------------------------------------------------------------- settings


def test_the_pool_is_unset_until_the_server_turns_it_on(monkeypatch):
    assert settings.from_env({}).warm_pool is None
    assert settings.from_env({"PCL_WARM_POOL": "1"}).warm_pool is True
    assert settings.from_env({"PCL_WARM_POOL": "0"}).warm_pool is False
    monkeypatch.setattr(settings, "_CURRENT", [settings.from_env({})])
    assert not warm_pool.enabled()  # a CLI or a test: the cold path
    assert settings.serve_by_default().warm_pool is True and warm_pool.enabled()
    monkeypatch.setattr(settings, "_CURRENT", [settings.from_env({"PCL_WARM_POOL": "0"})])
    assert settings.serve_by_default().warm_pool is False  # told off: the server obeys


@pytest.mark.parametrize(
    ("environ", "needle"),
    [
        ({"PCL_WARM_POOL": "maybe"}, "PCL_WARM_POOL"),
        ({"PCL_MEMORY_BUDGET_MB": "lots"}, "PCL_MEMORY_BUDGET_MB"),
        ({"PCL_MEMORY_BUDGET_MB": "10"}, "PCL_MEMORY_BUDGET_MB"),
        ({"PCL_MEMORY_BUDGET_MB": "2.5"}, "PCL_MEMORY_BUDGET_MB"),
    ],
)
def test_malformed_settings_name_their_variable(environ, needle):
    with pytest.raises(ValueError, match=needle):
        settings.from_env(environ)


def test_the_memory_budget_defaults_to_fit_a_small_host():
    assert settings.from_env({}).memory_budget_mb == 2500
    assert settings.from_env({"PCL_MEMORY_BUDGET_MB": " 1800 "}).memory_budget_mb == 1800


def test_app_py_under_apptest_stays_cold():
    """AppTest runs app.py in this process under a mock runtime: not a server, so the tests
    after it keep launching through torchrun and no zygote is started."""
    at = AppTest.from_file(ROOT_APP, default_timeout=60)
    at.run()
    assert not at.exception
    assert settings.current().warm_pool is None and not warm_pool.enabled()
    assert warm_pool.size() == {"zygotes": 0, "idle": 0, "starting": 0}


# ---------------------------------------------------------------- fallback to torchrun


def test_a_pool_that_cannot_start_falls_back_to_torchrun_and_says_so(monkeypatch, process_mark):
    from runner_support import marked

    attempts = []

    class NoZygote:
        def __init__(self) -> None:
            attempts.append(1)
            raise RuntimeError("the warm pool's process did not start")

    monkeypatch.setattr(warm_pool, "Zygote", NoZygote)
    monkeypatch.setattr(warm_pool, "_BROKEN", [])
    use_settings(monkeypatch, warm_pool=True)
    for _ in range(2):
        events = []
        result = launcher.launch("bench.noop_worker", 2, timeout_s=200, progress=events.append)
        assert result.ok, result.message
        codes = [e.event for e in events]
        assert codes.count("pool_fallback") == 1 and codes[-1] == "finished"
        fallback = next(e for e in events if e.event == "pool_fallback")
        assert fallback.values["reason"] == "the warm pool's process did not start"
    assert len(attempts) == 1  # the second launch went straight to torchrun (RETRY_S)
    assert warm_pool.size()["zygotes"] == 0
    assert marked(process_mark) == []


# ---------------------------------------------------------------- the memory budget


def _finished(seconds: float):
    def work(job):
        time.sleep(seconds)
        return RunResult.finished(({"rank": 0},), seconds, "f" * 64)

    return work


def test_over_budget_with_nothing_running_is_refused_at_once(monkeypatch):
    use_settings(monkeypatch, memory_budget_mb=64)  # less than this test process alone
    before = dict(jobs.STATS)
    events = []
    began = time.monotonic()
    result = launcher.launch("bench.noop_worker", 2, timeout_s=60, progress=events.append)
    assert time.monotonic() - began < 5
    assert result.outcome is Outcome.BUSY and "memory budget" in result.message
    assert jobs.STATS["launched"] == before.get("launched", 0)  # nothing was started
    (busy,) = events
    assert busy.event == "busy" and busy.values["reason"] == "memory"
    assert busy.values["budget_mb"] == 64 and busy.values["used_mb"] > 0


def test_a_job_waits_for_memory_while_another_runs_then_starts(monkeypatch):
    """Two free slots, room for one job's estimate: the second waits in line ("memory")
    until the first ends, then runs; neither is refused."""
    budget = math.ceil(memory.lab_mb()) + 300
    use_settings(monkeypatch, memory_budget_mb=budget, max_concurrent_runs=2)
    ended, events, results = {}, [], {}

    def first():
        results["first"] = jobs.submit(
            ("mem-test", 1), _finished(1.5), timeout_s=60, worker_hash="f" * 64, memory_mb=200
        )
        ended["first"] = time.monotonic()

    thread = threading.Thread(target=first)
    thread.start()
    deadline = time.monotonic() + 5
    while jobs.in_flight()["running"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    second = jobs.submit(
        ("mem-test", 2),
        _finished(0.1),
        timeout_s=60,
        worker_hash="f" * 64,
        memory_mb=200,
        progress=events.append,
    )
    thread.join()
    assert results["first"].ok and second.ok
    memory_events = [e for e in events if e.event == "memory"]
    assert len(memory_events) == 1 and memory_events[0].values["budget_mb"] == budget
    assert time.monotonic() - ended["first"] >= 0.1  # it ran after the first had ended
