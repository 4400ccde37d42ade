"""The hosted demo through the real server and real Chromium tabs, loopback only: a fresh
`streamlit run app.py` with no setting runs warm, 8 visitors pressing Run at once all get an
answer (short versions of `python -m bench --only load,soak`, bench/hosted.py), and 20 runs
in a row leave the server and its zygote as they found them."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench import hosted
from tests.e2e.conftest import CHROMIUM

pytestmark = pytest.mark.e2e
BUDGET_KB = 2500 * 1024  # the default PCL_MEMORY_BUDGET_MB


@pytest.fixture
def default_settings(monkeypatch, browser):
    """No PCL_* setting reaches the server: what a newcomer gets. (`browser` skips these
    tests where Chromium is missing, like every browser test.)"""
    assert os.path.exists(CHROMIUM)
    for name in [n for n in os.environ if n.startswith("PCL_")]:
        monkeypatch.delenv(name)


def in_own_thread(function, *args, **kwargs):
    """Run bench code that drives its own Playwright in a thread of its own: this thread's
    event loop belongs to the session's sync `browser`."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function, *args, **kwargs).result()


@pytest.mark.timeout(240)
def test_eight_visitors_at_once_each_get_an_answer(default_settings):
    out = in_own_thread(hosted.load_round)
    assert out["pool_ready"], "a fresh server with no setting did not start its warm pool"
    assert not out["torchrun_seen"], "a run went through cold torchrun"
    answers = {v["visitor"]: v for v in out["visitors"]}
    assert len(answers) == 8
    for name, visitor in answers.items():
        assert visitor["kind"] in ("result", "busy", "busy_memory"), (name, visitor)
        assert visitor["exceptions"] == 0, name
    assert out["extra_processes"] == []  # beside the server: its zygote and spares only
    assert out["zygotes"] == 1  # PCL_MAX_CONCURRENT_RUNS on this box's cores
    assert out["left_after_stop"] == {"processes": [], "tmp": []}  # not even torch's cache
    assert out["peak_tree_pss_kb"] < BUDGET_KB


@pytest.mark.timeout(240)
def test_twenty_runs_in_a_row_leave_nothing_growing(default_settings):
    out = in_own_thread(hosted.soak, 20, warmup=5)
    assert out["pool_ready"] and len(out["answers"]) == 20
    before, after = out["after_warmup"], out["at_end"]
    assert before["zygote_pid"] == after["zygote_pid"]  # the same zygote served every run
    for who in ("server", "zygote"):
        for key in ("pss_kb", "fds"):
            assert hosted.growth(before[who], after[who], key) <= hosted.GROWTH_GOAL, (who, key)
    assert out["extra_processes"] == [] and out["tmp_during"] == []
    assert out["left_after_stop"] == {"processes": [], "tmp": []}
