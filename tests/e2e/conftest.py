"""Real-browser fixtures: `streamlit run app.py` on a free local port, driven by Playwright
through Debian's Chromium (/usr/bin/chromium — never a downloaded browser).

On a laptop without Chromium the browser tests skip and say how to enable them; under CI
(CI=true) a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.cold_start import (
    CHROMIUM,
    CHROMIUM_ARGS,
    SETTLED,
    free_port,
    start_server,
    wait_healthy,
)

ROOT = Path(__file__).resolve().parents[2]
# Screenshots are for a person to look at, so they are taken only when PCL_SCREENSHOTS names
# the folder to keep them in (no test reads one back): a full-page screenshot lays the page
# out again at its whole height and encodes a PNG (the two page walks' 28 shots cost 28 s of
# their 85), and the suite took about fifty. Outside the checkout: a test on the other xdist
# worker that compares the source tree before and after its run (test_hf_trainer's
# nothing-left-behind) must never see them appear.
ARTIFACTS = Path(os.environ["PCL_SCREENSHOTS"]) if os.environ.get("PCL_SCREENSHOTS") else None
ENABLE_HINT = (
    "browser tests need Debian's Chromium and Playwright for Python: "
    "`sudo apt-get install -y chromium && pip install -r requirements-dev.txt`"
)


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}: {ENABLE_HINT}")
    pytest.skip(f"{reason}; {ENABLE_HINT}")


@contextmanager
def streamlit_server(env: dict | None = None):
    """`streamlit run app.py` on a free local port (with `env` added to its environment);
    yields its URL once healthy, and stops it (SIGTERM, as a host would) afterwards.

    A free port can be taken between `free_port` and the server's bind (the ranks' Gloo
    sockets and the pool's stores bind ephemeral ports all the time): a server that says so
    and exits is started again on another port, up to three times."""
    with tempfile.TemporaryFile() as log:
        for _ in range(3):
            port = free_port()
            log.seek(0)
            log.truncate()
            server = start_server(port, env=env, log=log)
            url = f"http://127.0.0.1:{port}"
            if wait_healthy(server, url, timeout_s=60):
                break
            _stop(server)
            log.seek(0)
            said = log.read().decode(errors="replace")
            taken = (f"Port {port} is not available", f"Port {port} is already in use")
            if not any(words in said for words in taken):  # Streamlit's words for it
                pytest.fail(f"streamlit did not become healthy on port {port}: {said[-2000:]}")
        else:
            pytest.fail("streamlit found every port it was given already in use")
        try:
            yield url
        finally:
            _stop(server)


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, then SIGKILL after 15 s; a group already gone
    (a server that exited by itself) is fine."""
    try:
        os.killpg(server.pid, 15)
        server.wait(timeout=15)
    except ProcessLookupError:
        server.wait()
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, 9)
        server.wait()


@pytest.fixture(scope="session")
def app_url():
    """One real Streamlit server for the whole session."""
    with streamlit_server() as url:
        yield url


@pytest.fixture(scope="session")
def playwright():
    """The session's one Playwright driver: its sync API allows one per thread, so every
    browser of the session is launched from it."""
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        _missing("Chromium is not installed")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright for Python is not installed")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright):
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield chromium
    chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


def wait_for_app(tab) -> None:
    """Wait until Streamlit has finished the script run and drawn every element: no
    running indicator and no element skeletons (lazy widgets paint a frame later)."""
    tab.wait_for_selector('[data-testid="stAppViewContainer"] h1')
    # Settled twice, 250 ms apart: not just between two reruns. (A second pause, after the
    # second look, waited for nothing: 250 ms at each of the browser tests' calls.)
    tab.wait_for_function(SETTLED, timeout=60_000)
    tab.wait_for_timeout(250)
    tab.wait_for_function(SETTLED, timeout=60_000)


def screenshot(tab, name: str) -> None:
    """A full-page screenshot `name`.png in $PCL_SCREENSHOTS; nothing when it is not set."""
    if ARTIFACTS is None:
        return
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
