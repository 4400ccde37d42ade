"""The hosted demo under many visitors: a real server, real Chromium tabs, loopback only.

    python -m bench --only load,soak
    python -m bench.hosted --load [--rounds 3]      # JSON
    python -m bench.hosted --soak 200               # JSON

load  8 visitors at once on a fresh server (default settings: the warm pool, 1 concurrent
      run on 2 cores, 8 in line), each in its own browser context on a different page or
      with different inputs: two identical page-06 requests, page 06 on 3 ranks, pages 08
      and 09 (the same clipping launch), the Full Transformer at two label sets and the
      trainer check. They press Run within a few milliseconds of each other; each must get
      its run's finished line or a clear "busy" answer, and no page may show an exception.
      Measured: click to answer per visitor (p50 / p95, inside the page), the peak memory of
      the server's whole process tree (PSS, sampled every 100 ms) against the budget, and
      what is left afterwards: beside the server only its zygotes and their spares, and
      nothing at all (no process, no temporary directory) once the server has stopped.
soak  N consecutive uncached runs of page 06 in one browser session (wq changes each time):
      the server's and the zygote's memory and open file descriptors after N runs against
      their values after the first 10 (the warm-up), and no temporary directory left.

Every process the server starts carries PCL_BENCH_MARK=<uuid> in its environment (found in
/proc), and its TMPDIR is a fresh directory, so leftovers cannot hide.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench import exit_on_sigterm, loadavg, stats
from bench.clicks import SETTLED, TreeSampler
from bench.cold_start import (
    CHROMIUM,
    CHROMIUM_ARGS,
    free_port,
    start_server,
    stop_server,
    wait_healthy,
)
from bench.report import Goal, Section, duration, megabytes, now
from pclab.runners import memory
from pclab.runners.zygote import waiting_spares
from pclab.ui import i18n

MARK_ENV = "PCL_BENCH_MARK"
LOAD_P95_GOAL_S = 30.0  # everyone answered within the 8-deep line's worst case on 2 cores
ANSWERED = ("result", "stored", "busy", "busy_memory")  # the kinds that answer a press
GROWTH_GOAL = 0.10


@dataclass(frozen=True)
class Visitor:
    name: str
    path: str  # page URL path, with any deep-link query
    button_key: str


VISITORS = (
    Visitor("06 at its defaults", "parameters", "parameters.run.button"),
    Visitor("06 at its defaults, a second visitor", "parameters", "parameters.run.button"),
    Visitor("06 on 3 ranks", "parameters?par_world_size=3", "parameters.run.button"),
    Visitor("08 clipping", "clipping", "clipping.run_button"),
    Visitor("09 coordinated step", "coordinated-step", "clipping.run_button"),
    Visitor("Transformer at its defaults", "experiment", "experiment.run.button"),
    Visitor(
        "Transformer, window 0 at 30 labels", "experiment?exp_labels0=30", "experiment.run.button"
    ),
    Visitor("trainer check", "check-trainer", "check.run.button"),
)


def _prefix(key: str) -> str:
    return i18n.text("en", key).split("{")[0].strip()


# The first answer a press gets, as the page shows it (English catalogue).
ANSWERS = {
    "result": _prefix("runs.done"),
    # the same launch as another visitor's (pages 08 and 09), finished before this page asked
    "stored": _prefix("runs.cached"),
    "failed": _prefix("runs.failed"),
    "busy": _prefix("runs.busy"),
    "busy_memory": _prefix("runs.busy_memory"),
}
ARM = """(answers) => {
    window.__pcl = {click: null, answer: null, kind: null};
    document.addEventListener('click', () => {
        if (window.__pcl.click === null) window.__pcl.click = performance.now();
    }, {capture: true, once: true});
    const look = () => {
        if (document.querySelector('[data-testid="stException"]')) {
            window.__pcl.answer = performance.now(); window.__pcl.kind = 'exception'; return;
        }
        const shown = [...document.querySelectorAll(
            '[data-testid="stExpander"] summary, [data-testid="stAlert"],'
            + ' [data-testid="stCaptionContainer"]'
        )].map(e => e.textContent);
        for (const [kind, text] of Object.entries(answers)) {
            if (shown.some(s => s.includes(text))) {
                window.__pcl.answer = performance.now(); window.__pcl.kind = kind; return;
            }
        }
        requestAnimationFrame(look);
    };
    requestAnimationFrame(look);
}"""


class Server:
    """`streamlit run app.py` with a mark and its own TMPDIR; knows its tree."""

    def __init__(self, env: dict | None = None, root: Path | None = None) -> None:
        self.mark = uuid.uuid4().hex
        self.tmp = Path(tempfile.mkdtemp(prefix="pcl-bench-tmp-"))
        # The server's own output, outside its TMPDIR (which must end empty): read when a
        # visitor got no answer.
        self.log = tempfile.NamedTemporaryFile(prefix="pcl-bench-server-", suffix=".log")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        extra = {MARK_ENV: self.mark, "TMPDIR": str(self.tmp), **(env or {})}
        self.proc = start_server(port, env=extra, root=root, log=self.log)
        if not wait_healthy(self.proc, self.url):
            self.stop()
            raise RuntimeError("the server never became healthy")

    def log_tail(self, lines: int = 40) -> list[str]:
        # Read through a path of its own: seeking the server's shared file offset would
        # make it write over its own output.
        text = Path(self.log.name).read_text(errors="replace")
        return text.splitlines()[-lines:]

    def tree(self) -> list[str]:
        """Every process under the server, with its state and command line."""
        return [f"{pid} {_state(pid)}: {_cmdline(pid)[:100]}" for pid in self.descendants()]

    def descendants(self) -> list[int]:
        return memory.descendants(self.proc.pid)

    def zygotes(self) -> list[int]:
        """The server's zygotes (its children running runners.zygote; the ranks they fork
        carry the same command line one level further down)."""
        children = memory.children(self.proc.pid)
        return [pid for pid in children if "pclab.runners.zygote" in _cmdline(pid)]

    def wait_for_pool(self, timeout_s: float = 240.0) -> bool:
        """Open the home page once (app.py starts the pool on its first script run), then
        True once a zygote has imported everything and forked its spares."""
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            tab = browser.new_page()
            tab.goto(self.url)
            tab.wait_for_selector('[data-testid="stAppViewContainer"] h1', timeout=120_000)
            browser.close()
        return self.idle_zygote(timeout_s) is not None

    def idle_zygote(self, timeout_s: float = 60.0) -> int | None:
        """A zygote holding its spares (a store and two ranks: it forks them once idle after
        a run), or None if none does within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready = [z for z in self.zygotes() if waiting_spares(z)]
            if ready:
                return ready[0]
            time.sleep(0.2)
        return None

    def extra_processes(self) -> list[str]:
        """Descendants that are neither a zygote nor one of its idle spares."""
        zygotes = set(self.zygotes())
        spares = {c for z in zygotes for c in waiting_spares(z)}
        left = [p for p in self.descendants() if p not in zygotes | spares]
        return [f"{pid}: {_cmdline(pid)[:80]}" for pid in left]

    def stop(self) -> dict:
        """Stop the server (SIGTERM, as a host would); what it left behind."""
        stop_server(self.proc)
        deadline = time.monotonic() + 10
        while marked(self.mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {"processes": marked(self.mark), "tmp": sorted(p.name for p in self.tmp.iterdir())}
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.log.close()
        return left


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


def marked(mark: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries MARK_ENV=mark."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found


# ---------------------------------------------------------------- load: 8 visitors at once


async def _settle(tab, timeout_s: float) -> None:
    await tab.wait_for_selector('[data-testid="stAppViewContainer"] h1', timeout=timeout_s * 1e3)
    for _ in range(2):
        await tab.wait_for_function(SETTLED, timeout=timeout_s * 1e3)
        await tab.wait_for_timeout(200)


async def _visit(browser, url: str, visitor: Visitor, armed, go, timeout_s: float) -> dict:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    tab = None
    try:
        tab = await context.new_page()
        await tab.goto(f"{url}/{visitor.path}", timeout=timeout_s * 1e3)
        await _settle(tab, timeout_s)
        await tab.evaluate(ARM, ANSWERS)
        button = tab.get_by_role("button", name=_prefix(visitor.button_key))
        armed()
        await go.wait()
        await button.click()
        await tab.wait_for_function("() => window.__pcl.answer !== null", timeout=timeout_s * 1e3)
        await _settle(tab, timeout_s)
        timing = await tab.evaluate("() => window.__pcl")
        exceptions = await tab.locator('[data-testid="stException"]').count()
        return {
            "visitor": visitor.name,
            "kind": timing["kind"],
            "answer_s": (timing["answer"] - timing["click"]) / 1000,
            "exceptions": exceptions,
        }
    except Exception as exc:  # noqa: BLE001 - a visitor without an answer is the finding
        return {
            "visitor": visitor.name,
            "kind": "no answer",
            "error": str(exc).splitlines()[0],
            "seen": await _what_the_page_shows(tab),
        }
    finally:
        await context.close()


# What a visitor without an answer was looking at: was the click seen, is the app still
# running a script, which status, expander and alert lines show, and the button's state.
SHOWN = """() => ({
    pcl: window.__pcl || null,
    running: document.querySelectorAll('[data-testid=stStatusWidgetRunningIcon]').length,
    connection: [...document.querySelectorAll('[data-testid=stStatusWidget]')]
        .map(e => e.textContent.trim()),
    lines: [...document.querySelectorAll(
        '[data-testid="stExpander"] summary, [data-testid="stAlert"], [data-testid=stException]'
    )].map(e => e.textContent.trim().slice(0, 160)),
    buttons: [...document.querySelectorAll('button')]
        .filter(b => /run/i.test(b.textContent)).map(b => [b.textContent.trim(), b.disabled]),
})"""


async def _what_the_page_shows(tab) -> dict | str:
    if tab is None:
        return "no page"
    try:
        return await tab.evaluate(SHOWN)
    except Exception as exc:  # noqa: BLE001 - the page itself may be gone
        return f"page unreadable: {exc}".splitlines()[0]


async def _visitors(url: str, visitors, timeout_s: float) -> list[dict]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        go, ready = asyncio.Event(), [0]

        def armed() -> None:
            ready[0] += 1
            if ready[0] == len(visitors):
                go.set()  # every tab is open and settled: all press Run now

        try:
            return await asyncio.gather(
                *(_visit(browser, url, v, armed, go, timeout_s) for v in visitors)
            )
        finally:
            await browser.close()


def visitors_at_once(url: str, visitors=VISITORS, timeout_s: float = 240.0) -> list[dict]:
    """Every visitor opens its page, then all press Run together; what each one saw."""
    return asyncio.run(_visitors(url, visitors, timeout_s))


def load_round(
    visitors=VISITORS,
    env: dict | None = None,
    root: Path | None = None,
    server: Server | None = None,
) -> dict:
    """One fresh server, warmed (its pool ready), then every visitor at once. `root`: serve
    another checkout (the "before" round: cold torchrun launches, no pool to wait for).
    Given a `server`, the round runs on it and leaves it serving (no "left_after_stop")."""
    own = server is None
    server = Server(env, root) if own else server
    sampler = TreeSampler(server.proc.pid)
    out: dict = {"load_start": loadavg(), "root": str(root or "")}
    try:
        pool_ready = server.wait_for_pool(timeout_s=240.0 if root is None else 0.0)
        out["pool_ready"] = pool_ready
        sampler.start()
        began = time.monotonic()
        out["visitors"] = visitors_at_once(server.url, visitors)
        out["wall_s"] = time.monotonic() - began
        if any(v["kind"] not in ANSWERED for v in out["visitors"]):
            out["tree_at_timeout"] = server.tree()
            out["server_log"] = server.log_tail()
        time.sleep(1.0)  # the last run's ranks are reaped after its reply
        out["extra_processes"] = server.extra_processes()
        out["zygotes"] = len(server.zygotes())
    finally:
        sampler.done.set()
        if own:
            out["left_after_stop"] = server.stop()
    out["peak_tree_pss_kb"], out["peak_tree_rss_kb"] = sampler.peak_pss_kb, sampler.peak_rss_kb
    out["torchrun_seen"] = sampler.torchrun_seen
    out["load_end"] = loadavg()
    return out


def percentile(samples: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) of the samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


# ---------------------------------------------------------------- soak: N runs in a row


def _process_figures(pid: int | None) -> dict:
    if pid is None:
        return {}
    return {
        "pss_kb": memory.pss_kb(pid),
        "rss_kb": memory.rss_kb(pid),
        "fds": memory.fd_count(pid),
    }


def soak(
    runs: int, warmup: int = 10, env: dict | None = None, server: Server | None = None
) -> dict:
    """`runs` consecutive uncached page-06 runs in one session; figures after `warmup`
    runs and at the end. Given a `server`, the soak runs on it and leaves it serving."""
    from playwright.sync_api import sync_playwright

    from bench.clicks import CASES, press, settle

    own = server is None
    server = Server(env) if own else server
    out: dict = {"runs": runs, "warmup": warmup, "load_start": loadavg(), "answers": []}
    try:
        out["pool_ready"] = server.wait_for_pool()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport={"width": 1400, "height": 1000}, locale="en-US")
            tab.set_default_timeout(120_000)
            tab.goto(f"{server.url}/parameters")
            settle(tab)
            field = tab.get_by_label(i18n.text("en", "parameters.controls.wq"))
            for i in range(runs):
                field.fill(f"{-4.9 + 9.8 * i / max(runs - 1, 1):.4f}")
                field.press("Enter")
                tab.wait_for_timeout(100)
                settle(tab)
                out["answers"].append(press(tab, CASES["parameters"])["result_s"])
                if i + 1 == warmup:  # both readings of an idle zygote holding its spares
                    zygote = server.idle_zygote()
                    out["after_warmup"] = {
                        "server": _process_figures(server.proc.pid),
                        "zygote": _process_figures(zygote),
                        "zygote_pid": zygote,
                    }
            browser.close()
        time.sleep(1.0)
        zygote = server.idle_zygote()
        out["at_end"] = {
            "server": _process_figures(server.proc.pid),
            "zygote": _process_figures(zygote),
            "zygote_pid": zygote,
        }
        out["extra_processes"] = server.extra_processes()
        # runs' own directories only: the server's torch cache lives as long as the server
        out["tmp_during"] = sorted(p.name for p in server.tmp.iterdir() if "pcl-run-" in p.name)
    finally:
        if own:
            out["left_after_stop"] = server.stop()
    out["load_end"] = loadavg()
    return out


def growth(before: dict, after: dict, key: str) -> float | None:
    if not before.get(key) or after.get(key) is None:
        return None
    return after[key] / before[key] - 1


# ---------------------------------------------------------------- sections


def run_load(quick: bool = False, repeats: int | None = None) -> Section:
    from bench import child_json
    from bench.clicks import checkout

    rounds = repeats or (1 if quick else 3)
    before = os.environ.get("PCL_BENCH_BEFORE", "")
    section = Section(
        "load",
        "8 visitors at once (real server, Chromium, loopback)",
        ["round", "answers", "click → answer: p50", "p95", "max", "peak tree memory", "left"],
        load_start=loadavg(),
        started=now(),
    )
    began = time.perf_counter()
    results = [child_json("bench.hosted", ["--load"], timeout_s=1200) for _ in range(rounds)]
    if before:
        root = ["--root", str(checkout(before))]
        old = child_json("bench.hosted", ["--load", *root], timeout_s=1800)
        if "error" not in old:
            answers = [v["answer_s"] for v in old["visitors"] if "answer_s" in v]
            kinds = sorted({v["kind"] for v in old["visitors"]})
            section.rows.append(
                [
                    f"before (`{before}`, cold torchrun then)",
                    ", ".join(kinds),
                    duration(percentile(answers, 50)),
                    duration(percentile(answers, 95)),
                    duration(max(answers, default=None)),
                    f"{megabytes(old['peak_tree_pss_kb'])} PSS "
                    f"({megabytes(old['peak_tree_rss_kb'])} RSS)",
                    "—",
                ]
            )
        else:
            section.notes.append(f"before round not measured: {old['error']}")
    budget_kb = 2500 * 1024
    times, problems = [], []
    for i, r in enumerate(results, 1):
        if "error" in r:
            section.notes.append(f"round {i}: not measured: {r['error']}")
            problems.append(r["error"])
            continue
        answers = [v["answer_s"] for v in r["visitors"] if "answer_s" in v]
        times += answers
        kinds = {}
        for v in r["visitors"]:
            kinds[v["kind"]] = kinds.get(v["kind"], 0) + 1
        left = r["extra_processes"] + r["left_after_stop"]["processes"]
        left += r["left_after_stop"]["tmp"]
        section.rows.append(
            [
                str(i),
                ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())),
                duration(percentile(answers, 50)),
                duration(percentile(answers, 95)),
                duration(max(answers, default=None)),
                f"{megabytes(r['peak_tree_pss_kb'])} PSS ({megabytes(r['peak_tree_rss_kb'])} RSS)",
                "nothing" if not left else "; ".join(map(str, left))[:120],
            ]
        )
        bad = [v for v in r["visitors"] if v["kind"] not in ANSWERED]
        bad += [v for v in r["visitors"] if v.get("exceptions")]
        problems += [f"{v['visitor']}: {v.get('kind')} {v.get('error', '')}" for v in bad]
        problems += [f"left: {x}" for x in left]
    good = [r for r in results if "error" not in r]
    peak = max((r["peak_tree_pss_kb"] for r in good), default=None)
    p95 = percentile(times, 95)
    section.goals += [
        Goal(
            "every visitor gets its result or a clear busy answer; no exception box; nothing left",
            "yes" if good and not problems else "; ".join(problems)[:200] or "not measured",
            "yes",
            bool(good) and not problems,
        ),
        Goal(
            "peak memory of the server's whole tree (PSS)",
            megabytes(peak),
            f"< {megabytes(budget_kb)} (the default budget)",
            None if peak is None else peak < budget_kb,
        ),
        Goal(
            "click → answer under load, p95 over every visitor and round",
            duration(p95),
            f"≤ {duration(LOAD_P95_GOAL_S)}",
            None if p95 is None else p95 <= LOAD_P95_GOAL_S,
        ),
    ]
    section.notes += [
        f"{len(VISITORS)} visitors per round, each a Chromium context on a fresh server with "
        "default settings (warm pool, PCL_MAX_CONCURRENT_RUNS 1 on 2 cores, 8 in line); all "
        "press Run once every tab has settled. Visitors: "
        + "; ".join(v.name for v in VISITORS)
        + ". p50 / p95 over all "
        f"{len(times)} answers: {duration(percentile(times, 50))} / {duration(p95)}.",
        "The answer is the run's finished line (or a busy or failed one); a visitor in line "
        "waits for the runs ahead of it, so the slowest answers are the last in line: on 2 "
        "cores one run holds the processes at a time.",
    ]
    section.data = {"rounds": results, "before": old if before else None}
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section


def run_soak(quick: bool = False, repeats: int | None = None) -> Section:
    from bench import child_json

    runs = repeats or (20 if quick else 200)
    section = Section(
        "soak",
        f"Soak: {runs} consecutive uncached runs through the warm pool",
        ["process", "after 10 runs", f"after {runs} runs", "growth"],
        load_start=loadavg(),
        started=now(),
    )
    began = time.perf_counter()
    r = child_json("bench.hosted", ["--soak", str(runs)], timeout_s=3600)
    if "error" in r:
        section.notes.append(f"not measured: {r['error']}")
    else:
        worst = 0.0
        for who in ("server", "zygote"):
            for key, unit in (("pss_kb", megabytes), ("rss_kb", megabytes), ("fds", str)):
                a, b = r["after_warmup"][who], r["at_end"][who]
                g = growth(a, b, key)
                worst = max(worst, g or 0.0)
                section.rows.append(
                    [
                        f"{who}: {key.split('_')[0].upper() if key != 'fds' else 'open fds'}",
                        unit(a.get(key)),
                        unit(b.get(key)),
                        "—" if g is None else f"{g:+.1%}",
                    ]
                )
        same = r["after_warmup"]["zygote_pid"] == r["at_end"]["zygote_pid"]
        left = r["left_after_stop"]["processes"] + r["left_after_stop"]["tmp"] + r["tmp_during"]
        answers = r["answers"]
        section.goals += [
            Goal(
                "server and zygote memory and open fds: growth after the warm-up",
                f"{worst:+.1%} at most" + ("" if same else " (the zygote was replaced)"),
                f"≤ {GROWTH_GOAL:.0%}",
                worst <= GROWTH_GOAL and same,
            ),
            Goal(
                "temporary directories and processes left",
                "none" if not left and not r["extra_processes"] else str(left)[:120],
                "none",
                not left and not r["extra_processes"],
            ),
        ]
        section.notes.append(
            f"{runs} runs of page 06 in one Chromium session, wq changed before each press "
            f"(uncached); click → verdict median {duration(statistics.median(answers))}, "
            f"p95 {duration(percentile(answers, 95))}, max {duration(max(answers))}. Memory is "
            "PSS and RSS from /proc; the server's TMPDIR was a fresh directory, checked during "
            "the run and after the server stopped."
        )
        section.data = {
            k: r[k] for k in ("after_warmup", "at_end", "answers", "left_after_stop", "tmp_during")
        }
        section.data["answer_s"] = stats(answers)
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hosted", description=__doc__.split("\n")[0]
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--load", action="store_true", help="one round of 8 visitors at once")
    mode.add_argument("--soak", type=int, metavar="N", help="N consecutive uncached runs")
    parser.add_argument("--root", type=Path, default=None, help="--load: another checkout")
    args = parser.parse_args(argv)
    if not os.path.exists(CHROMIUM):
        print(json.dumps({"error": "Chromium is not installed"}))
        return 0
    try:
        out = load_round(root=args.root) if args.load else soak(args.soak)
    except Exception as exc:  # noqa: BLE001 - reported in the section, not a traceback
        out = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
