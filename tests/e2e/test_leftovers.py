"""Nothing of a run outlives it, however it ends: a real server (the warm pool on, its own
TMPDIR) runs the bundled HF Trainer check at P = 4, K = 3 from a browser, and while its ranks
hold their `pcl-hf-trainer-*` output folders the visitor closes the tab, or the host stops
the server (SIGTERM), or kills it (SIGKILL: then the next server's start removes what it
left). Every lab folder is named after its owner process (runners/scratch.py); a rank's own
temporary folders live inside its run's."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from bench.cold_start import free_port, start_server, stop_server, wait_healthy
from tests.e2e.conftest import streamlit_server, wait_for_app
from tests.runners.runner_support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
HF_CHECK = "check-trainer?chk_example=hf_trainer&chk_world_size=4&chk_accum=3"


def _rank_folders(temp: Path) -> list[Path]:
    return sorted(temp.rglob("pcl-hf-trainer-*"))


def _lab_folders(temp: Path) -> list[str]:
    return sorted(p.name for p in temp.iterdir() if p.name.startswith("pcl-"))


def _start_the_check(browser, url: str, temp: Path):
    """A tab that pressed Run on the HF Trainer check; returns once a rank holds its output
    folder inside the run's folder (the moment the issue's leftovers were made)."""
    tab = browser.new_page(viewport={"width": 1400, "height": 1000})
    tab.set_default_timeout(60_000)
    tab.goto(f"{url}/{HF_CHECK}")
    wait_for_app(tab)
    tab.get_by_role("button", name=re.compile("Run the trainer check")).click()
    assert wait_for(lambda: _rank_folders(temp), 240), "no rank made its output folder"
    held = _rank_folders(temp)
    assert all(p.parent.parent.name.startswith("pcl-run-") for p in held), held
    assert not list(temp.glob("pcl-hf-trainer-*")), "a rank's folder is outside its run's"
    return tab


def test_a_closed_tab_then_a_stopped_server_mid_check_leave_no_folder(browser, tmp_path):
    """One server, two endings: the only requester closes its tab (the job is cancelled and
    its folders go while the server serves on), then a second visitor's check is running
    when the host stops the server (SIGTERM, the fixture's stop, as a host's: the server
    cancels the run on its way out). One server for both: each start costs its warm pool."""
    with streamlit_server(env={"TMPDIR": str(tmp_path)}) as url:
        tab = _start_the_check(browser, url, tmp_path)
        tab.close()  # every requester left: the job is cancelled
        gone = wait_for(lambda: not list(tmp_path.glob("pcl-run-*")), 60)
        assert gone, _lab_folders(tmp_path)
        assert _rank_folders(tmp_path) == []
        assert [n for n in _lab_folders(tmp_path) if not n.startswith("pcl-torch-cache-")] == []
        tab = _start_the_check(browser, url, tmp_path)  # a run, not the stored result
    tab.close()
    assert list(tmp_path.iterdir()) == [], _lab_folders(tmp_path)


def test_a_killed_servers_folders_are_removed_by_the_next_start(browser, tmp_path):
    env = {"TMPDIR": str(tmp_path)}
    port = free_port()
    first = start_server(port, env=env)
    try:
        assert wait_healthy(first, f"http://127.0.0.1:{port}")
        tab = _start_the_check(browser, f"http://127.0.0.1:{port}", tmp_path)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # no clean-up of its own can run
        first.wait(timeout=30)
    tab.close()
    # What the SIGKILL left: the run's folders, unless the zygote (its parent-death signal is
    # a SIGTERM) cleaned up first - a race a loaded box can go either way. Whatever is left
    # must be gone after the next start; test_scratch plants a dead owner's folders for sure.
    left = _lab_folders(tmp_path)
    with streamlit_server(env=env) as url:
        second = browser.new_page()
        second.goto(url)  # the first page view builds the runtime (and sweeps)
        wait_for_app(second)
        second.close()
        now = _lab_folders(tmp_path)
        # At most the new server's own torch cache (made when its preload gets to it).
        assert not set(now) & set(left) and len(now) <= 1, now
    assert list(tmp_path.iterdir()) == [], _lab_folders(tmp_path)
    stop_server(first)
