"""The hosted demo through the real server and real Chromium tabs, loopback only: a fresh
`streamlit run app.py` with no setting runs warm, 8 visitors pressing Run at once all get an
answer, and 12 runs in a row after them leave the server and its zygote as they found them
(short versions of `python -m bench --only load,soak`, bench/hosted.py, on one server). The
soak's figure is the bench's (200 runs, BENCHMARKS.md); the suite's twelve, measured after the
fourth, catch what grows by a run's worth (a descriptor or a zygote leaked per run)."""

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


# The round's own limits are the pool's start (240 s) and each visitor's answer (240 s): the
# test's must not be tighter than what it tests, or a slow round reads as a hang. (Two rounds
# in CI once left a visitor without an answer: its page had failed with SystemError from
# CPython 3.11's AST constructor, parsing sources for the cache key in two sessions at once
# (runners/code_hash.py now parses under a lock), and a visitor whose run another page had
# just finished sees the stored-result line.) One server for both rounds, as a hosted demo
# lives: the soak's twelve runs follow the eight visitors, and stopping it at the end must
# leave nothing (each server of its own cost a start, a warm pool and two browsers).
@pytest.mark.timeout(840)
def test_eight_visitors_at_once_then_twelve_runs_in_a_row(default_settings):
    server = hosted.Server()
    try:
        load = in_own_thread(hosted.load_round, server=server)
        soak = in_own_thread(hosted.soak, 12, warmup=4, server=server)
    finally:
        left = server.stop()
    assert load["pool_ready"], "a fresh server with no setting did not start its warm pool"
    assert not load["torchrun_seen"], "a run went through cold torchrun"
    answers = {v["visitor"]: v for v in load["visitors"]}
    assert len(answers) == 8
    for name, visitor in answers.items():
        assert visitor["kind"] in hosted.ANSWERED, (name, visitor, load.get("server_log"))
        assert visitor["exceptions"] == 0, name
    assert load["extra_processes"] == []  # beside the server: its zygote and spares only
    assert load["zygotes"] == 1  # PCL_MAX_CONCURRENT_RUNS on this box's cores
    assert load["peak_tree_pss_kb"] < BUDGET_KB

    assert soak["pool_ready"] and len(soak["answers"]) == 12
    before, after = soak["after_warmup"], soak["at_end"]
    assert before["zygote_pid"] == after["zygote_pid"]  # the same zygote served every run
    for who in ("server", "zygote"):
        for key in ("pss_kb", "fds"):
            assert hosted.growth(before[who], after[who], key) <= hosted.GROWTH_GOAL, (who, key)
    assert soak["extra_processes"] == [] and soak["tmp_during"] == []
    assert left == {"processes": [], "tmp": []}  # not even torch's cache


def test_a_server_past_its_memory_budget_refuses_runs_with_a_clear_message(browser):
    """A budget smaller than the server itself: pressing Run is answered at once with the
    memory message (nothing is started), the page works on, and the server keeps serving."""
    import re

    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    from pclab.ui import i18n
    from tests.e2e.conftest import streamlit_server, wait_for_app

    with streamlit_server(env={"PCL_MEMORY_BUDGET_MB": "64"}) as url:
        tab = browser.new_page(viewport={"width": 1400, "height": 1000}, locale="en-US")
        try:
            tab.goto(f"{url}/parameters")
            wait_for_app(tab)
            tab.get_by_role("button", name=re.compile("Run the check on 2 processes")).click()
            said = i18n.text("en", "runs.busy_memory").split("{")[0].strip()
            try:
                tab.get_by_text(said).wait_for(timeout=60_000)
            except PlaywrightTimeout:  # seen once in a loaded suite, never alone: say what showed
                shown = tab.locator('[data-testid="stMain"]').inner_text()[-1500:]
                pytest.fail(f"no memory message 60 s after Run; the page shows: {shown!r}")
            wait_for_app(tab)
            assert tab.locator('[data-testid="stException"]').count() == 0
            tab.goto(f"{url}/ledger")  # the server is alive and serving
            wait_for_app(tab)
        finally:
            tab.close()
