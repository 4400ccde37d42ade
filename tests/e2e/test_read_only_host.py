"""A host runs the app as an unprivileged user from a read-only checkout: every page loads
and a real run completes, and nothing is written into the source tree.

The tracked files are copied to a temporary directory, made read-only (files 0444,
directories 0555), and `streamlit run app.py` is started there as `nobody` through
`setpriv`, with HOME and TMPDIR in a writable directory of its own. Both sit in a folder
every user can enter (the system's temporary folder, not pytest's, whose root is mode 700),
as a host's checkout would. Where the interpreter itself sits in a directory `nobody` cannot
enter (a Python under /root, mode 700, or a virtual environment whose `python` links there),
the server keeps one capability,
CAP_DAC_READ_SEARCH: it may read and search any file, as if the interpreter were installed
system-wide, and still cannot write anything `nobody` could not (checked below with the same
command); a world-readable virtual environment needs no capability. When the server dies,
the test fails with the server's own log. Needs root (to switch users).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from bench.cold_start import free_port, stop_server
from pclab.runners import memory
from pclab.ui.pages import HOME, PAGES
from tests.e2e.conftest import ROOT, wait_for_app

pytestmark = pytest.mark.e2e
NOBODY = 65534
READ_SEARCH = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]


def _as_nobody(extra_caps: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *extra_caps]


def _works(command: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


# What the server needs of its interpreter as `nobody`: this very Python (its own standard
# library, not another one found by the search for a prefix) and the right to start it again
# by its path, as the warm pool and torchrun do.
SERVES = """
import os, subprocess, sys
assert os.path.realpath(os.__file__) == {stdlib!r}, os.__file__
subprocess.run([sys.executable, "-c", "import streamlit"], check=True)
"""


def _serves_as_nobody(env: dict) -> bool:
    """Whether `nobody` can run this interpreter as the server does. setpriv starts it while
    still privileged, so a Python under a 0700 home can start, miss its own standard library
    (and take the system's, /usr/lib/python3.X, when the versions match), then fail to start
    its own children: only a check from inside the started interpreter tells."""
    code = SERVES.format(stdlib=os.path.realpath(os.__file__))
    return _works([*_as_nobody([]), sys.executable, "-c", code], env).returncode == 0


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"


def _shown(tab) -> list[str]:
    """The page's status, expander and alert lines: what a visitor would read."""
    selector = '[data-testid="stExpander"], [data-testid="stAlert"], [data-testid="stException"]'
    return [text[:300] for text in tab.locator(selector).all_inner_texts()]


def _runs_zygote(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"pclab.runners.zygote" in f.read()
    except OSError:
        return False


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under root with its mode, size and mtime."""
    out = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        out[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return out


def _open_to_all(folder: Path) -> bool:
    """Whether every user can enter `folder` and each folder above it."""
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [folder, *folder.parents])


def _world_traversable_folder() -> Path:
    """A new folder every user can enter: in the system's temporary folder (or /tmp when
    that one is private), never under pytest's own temporary root (mode 700)."""
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        if Path(base).is_dir() and _open_to_all(Path(base).resolve()):
            folder = Path(tempfile.mkdtemp(prefix="pcl-read-only-host-", dir=base))
            folder.chmod(0o755)
            return folder
    pytest.skip("no temporary folder every user can enter")


@pytest.fixture
def read_only_checkout():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("switching to an unprivileged user needs root and setpriv (util-linux)")
    base = _world_traversable_folder()
    checkout, home = base / "lab", base / "home"
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        target = checkout / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    for path in [checkout, *checkout.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    (home / "tmp").mkdir(parents=True)
    for path in (home, home / "tmp"):
        os.chown(path, NOBODY, NOBODY)
    try:
        yield checkout, home
    finally:
        for path in [checkout, *checkout.rglob("*")]:  # writable again, to be removed
            path.chmod(stat.S_IRWXU)
        shutil.rmtree(base, ignore_errors=True)


# Above the test's own limits (the server's start, 90 s; every page; the run, 180 s), so a
# slow box shows the page's or the server's words, not pytest's stack dump.
@pytest.mark.timeout(600)
def test_an_unprivileged_user_serves_every_page_and_a_run_from_a_read_only_checkout(
    read_only_checkout, browser
):
    checkout, home = read_only_checkout
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "LANG": "C.UTF-8",
    }
    caps = [] if _serves_as_nobody(env) else READ_SEARCH  # see the module's docstring
    probe = f"open({str(checkout / 'app.py')!r}, 'a')"
    refused = _works([*_as_nobody(caps), sys.executable, "-c", probe], env)
    assert "PermissionError" in refused.stderr, "the server's user could write the checkout"
    before = _snapshot(checkout)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = home / "server.log"
    command = [
        *_as_nobody(caps),
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
    ]
    with log.open("wb") as out:
        server = subprocess.Popen(
            command,
            cwd=checkout,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, f"the server died: {_tail(log)}"
            assert time.monotonic() < deadline, f"the server never became healthy: {_tail(log)}"
            time.sleep(0.3)
        with open(f"/proc/{server.pid}/status") as f:
            uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
        assert {int(u) for u in uids} == {NOBODY}  # real, effective, saved, filesystem

        tab = browser.new_page(viewport={"width": 1400, "height": 1000}, locale="en-US")
        try:
            tab.goto(url)  # then every other page by the sidebar, as a visitor goes
            for page in [*PAGES, next(p for p in PAGES if p.url == "parameters")]:
                if page is not HOME:
                    tab.locator(f'[data-testid="stSidebarNav"] a[href$="/{page.url}"]').click()
                    tab.wait_for_function(f"() => location.pathname.endsWith('/{page.url}')")
                wait_for_app(tab)
                assert tab.locator('[data-testid="stException"]').count() == 0, page.url
            tab.get_by_role("button", name=re.compile("Run the check on 2 processes")).click()
            try:
                tab.get_by_text(re.compile("The real run agrees with the prediction")).wait_for(
                    timeout=180_000
                )
            except Exception as exc:
                raise AssertionError(f"the page shows: {_shown(tab)}") from exc
        finally:
            tab.close()
        zygotes = [p for p in memory.children(server.pid) if _runs_zygote(p)]
        assert len(zygotes) == 1, "the run did not go through the warm pool"
    except Exception as exc:
        if server.poll() is not None:  # the browser's timeout is not the story: the log is
            raise AssertionError(f"the server died: {_tail(log)}") from None
        raise AssertionError(f"{exc}\n--- the server's log ---\n{_tail(log)}") from exc
    finally:
        stop_server(server)  # SIGTERM, then SIGKILL; a server that already died is no error
    assert _snapshot(checkout) == before  # nothing written into the source tree
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "PermissionError" not in text, text[-2000:]
