"""App cold start: from `streamlit run app.py` to a healthy server and a rendered first page.

    python -m bench --only cold [--quick] [--repeats N]

Each repeat starts a fresh server (an argument list, its own process group), polls
/_stcore/health every 25 ms, then has an already-open Chromium tab (Playwright driving
Debian's /usr/bin/chromium, never a downloaded browser) load the home page and wait for its
<h1> - the first thing a visitor reads - and for the page to settle (no running indicator,
no skeletons). The first repeat then visits every registered page once, timing each first
visit on the warm server, and reads the server's peak resident memory (VmHWM) before and
after. The server's whole process group is killed after every repeat. Without Playwright or
Chromium only the health time is measured, and the section says so.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from bench import ROOT, loadavg, stats, vm_kb
from bench.pages import registered_pages
from bench.report import Goal, Section, duration, megabytes, now, spread

GOAL_S = 3.0
CHROMIUM = "/usr/bin/chromium"
# Chromium's flags for a closed network (no background calls home; no sandbox as root), for
# the bench's browsers and the suite's alike.
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
SETTLED = """() => document.querySelectorAll(
    '[data-testid=stStatusWidgetRunningIcon], [data-testid=stAppRunningIcon],'
    + ' [data-testid*=keleton]'
).length === 0"""
H1 = '[data-testid="stAppViewContainer"] h1'
MINIMAL = "bench/minimal_app.py"  # Streamlit's own floor: an app that only writes a title


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    port: int,
    script: str = "app.py",
    env: dict | None = None,
    options: tuple[str, ...] = (),
    root=None,
    log=None,
    serve: bool = False,
) -> subprocess.Popen:
    """`streamlit run <script>` on 127.0.0.1:<port>, with `env` added to this environment and
    extra command-line `options` (e.g. ("--client.toolbarMode", "developer")), from the
    checkout `root` (default: this one; the click bench measures an older one beside it);
    its output goes to the open file `log` (default: nowhere). `serve`: the lab's start
    command instead, `pclab serve` (app.py, warmed as the server starts)."""
    # setpriv (util-linux) arms PR_SET_PDEATHSIG and execs: a bench or test process that is
    # killed takes its server with it, instead of leaving it serving.
    dies_with_us = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []
    cmd = [
        *dies_with_us,
        sys.executable,
        "-m",
        *(["pclab", "serve"] if serve else ["streamlit", "run", script]),
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        *options,
    ]
    return subprocess.Popen(
        cmd,
        cwd=root or ROOT,
        env=dict(os.environ, **(env or {})),
        stdin=subprocess.DEVNULL,
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        start_new_session=True,  # one killpg stops the server and anything it started
    )


def stop_server(server: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(server.pid, sig)
        except OSError:
            pass
        try:
            server.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # anything left in the group (nothing should be)
        os.killpg(server.pid, signal.SIGKILL)
    except OSError:
        pass


def wait_healthy(server: subprocess.Popen, url: str, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.025)
    return False


def _browser():
    """((playwright, browser), "") or (None, why not)."""
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        return None, "Chromium is not installed"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None, "Playwright for Python is not installed"
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    except Exception as exc:  # noqa: BLE001 - any launch failure means "health only"
        playwright.stop()
        return None, f"Chromium did not start: {str(exc).splitlines()[0]}"
    return (playwright, browser), ""


def _visit(tab, url: str) -> tuple[float, float]:
    """Seconds until the <h1> is visible, and until the page has settled."""
    began = time.perf_counter()
    tab.goto(url)
    tab.wait_for_selector(H1, state="visible", timeout=120_000)
    h1 = time.perf_counter() - began
    for _ in range(2):  # settled twice, 200 ms apart (not merely between two reruns)
        tab.wait_for_function(SETTLED, timeout=120_000)
        tab.wait_for_timeout(200)
    return h1, time.perf_counter() - began - 0.4


def one_start(browser, tour: bool, script: str = "app.py") -> dict:
    """One fresh server: health, then the home page in a tab opened beforehand (not timed)."""
    context = None
    if browser is not None:
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
        tab = context.new_page()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    began = time.perf_counter()
    server = start_server(port, script)
    out: dict = {"script": script}
    try:
        if not wait_healthy(server, url):
            return {"error": "the server never became healthy"}
        out["health_s"] = time.perf_counter() - began
        out["server_kb_healthy"] = vm_kb(server.pid)
        if context is None:
            return out
        navigate_at = time.perf_counter() - began
        h1, settled = _visit(tab, url)
        out["first_page_s"] = navigate_at + h1
        out["first_page_settled_s"] = navigate_at + settled
        out["browser_h1_s"] = h1
        out["server_kb_first_page"] = vm_kb(server.pid)
        if tour:
            visits = {}
            for page, path in _page_paths():
                visits[page] = _visit(tab, f"{url}/{path}")[1]
            out["tour_settled_s"] = visits
            out["server_kb_all_pages"] = vm_kb(server.pid)
            out["server_rss_kb_all_pages"] = vm_kb(server.pid, "VmRSS")
        return out
    finally:
        if context is not None:
            context.close()
        stop_server(server)


def _page_paths() -> list[tuple[str, str]]:
    """(page file, url path) of every registered page; home is the empty path."""
    import ast

    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "PAGES" for t in node.targets
        ):
            entries = ast.literal_eval(node.value)
            return [(e[0], "" if e[1] == "home" else e[1]) for e in entries]
    return [(p, "") for p in registered_pages()]


def run(quick: bool = False, repeats: int | None = None) -> Section:
    repeats = repeats or (1 if quick else 5)
    section = Section(
        "cold",
        "App cold start (`streamlit run app.py`)",
        ["measurement", "median (min–max)", "n"],
        load_start=loadavg(),
        started=now(),
    )
    began = time.perf_counter()
    opened, reason = _browser()
    browser = opened[1] if opened else None
    results, floor = [], []
    try:
        for i in range(repeats):  # the lab and the one-title floor, alternately
            results.append(one_start(browser, tour=(i == 0 and not quick)))
            floor.append(one_start(browser, tour=False, script=MINIMAL))
    finally:
        if opened:
            opened[1].close()
            opened[0].stop()
    good = [r for r in results if "error" not in r]
    series = {
        "start → /_stcore/health 200": [r["health_s"] for r in good],
        "start → home page <h1> visible": [r["first_page_s"] for r in good if "first_page_s" in r],
        "start → home page settled": [
            r["first_page_settled_s"] for r in good if "first_page_settled_s" in r
        ],
        "browser: navigate → <h1> (server already healthy)": [
            r["browser_h1_s"] for r in good if "browser_h1_s" in r
        ],
    }
    for name, samples in series.items():
        if samples:
            section.rows.append([name, spread(stats(samples)), str(len(samples))])
    good_floor = [r for r in floor if "error" not in r]
    floor_series = {
        "floor (one-title app): start → /_stcore/health 200": [r["health_s"] for r in good_floor],
        "floor (one-title app): start → <h1> visible": [
            r["first_page_s"] for r in good_floor if "first_page_s" in r
        ],
    }
    for name, samples in floor_series.items():
        if samples:
            section.rows.append([name, spread(stats(samples)), str(len(samples))])
    memory = {
        "server peak RSS (VmHWM) when healthy": [
            r["server_kb_healthy"] for r in good if r.get("server_kb_healthy")
        ],
        "server peak RSS after the home page": [
            r["server_kb_first_page"] for r in good if r.get("server_kb_first_page")
        ],
        "server peak RSS after visiting every page": [
            r["server_kb_all_pages"] for r in good if r.get("server_kb_all_pages")
        ],
    }
    for name, samples in memory.items():
        if samples:
            section.rows.append([name, spread(stats(samples), unit=megabytes), str(len(samples))])
    tour = next((r["tour_settled_s"] for r in good if "tour_settled_s" in r), {})
    for page, seconds in tour.items():
        section.rows.append(
            [f"first visit of `{page}` on the warm server (settled)", duration(seconds), "1"]
        )
    first = series["start → home page <h1> visible"]
    if first:
        median = stats(first)["median"]
        section.goals.append(
            Goal(
                "cold start to a rendered first page",
                duration(median),
                f"≤ {GOAL_S:g} s",
                median <= GOAL_S,
            )
        )
    else:
        section.goals.append(
            Goal("cold start to a rendered first page", "not measured", f"≤ {GOAL_S:g} s", None)
        )
        section.notes.append(f"Health only: {reason}.")
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        section.notes.append(f"{len(errors)} repeat(s) failed: {errors[0]}")
    section.notes.append(
        f"{os.cpu_count()} cores. The first-page time counts from starting the server process; "
        "the browser was already open. Each visit waits for the <h1>, then for no running "
        "indicator twice, 200 ms apart (the 0.4 s of waiting is subtracted).",
    )
    section.notes.append(
        f"The floor rows start `{MINIMAL}` (a single st.title) the same way, alternately with the "
        "lab: the part of the cold start that is Streamlit's own server and browser bundle."
    )
    section.data = {"repeats": results, "floor": floor, "browser": reason or "chromium"}
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section
