"""Click to result in a real browser: how long a visitor waits after pressing Run.

    python -m bench --only clicks [--quick] [--repeats N]
    python -m bench.clicks --repeats 5 [--pool off] [--pages parameters,experiment]  # JSON

A real server (`streamlit run app.py`, default settings unless --pool says otherwise) and
Debian's Chromium driven by Playwright. For each page with a real run (06, 08, the Full
Transformer, and the check page's plain and Hugging Face Trainer examples) the visitor opens
the page, waits until it has settled, presses Run, and the
clock runs from the click to the run's verdict on screen (page 06 and 08: the green
"agrees" box; the Transformer: the last part of its results). Both ends are read inside the
page (performance.now() in a capturing click listener and in a requestAnimationFrame check),
so Playwright's own round trips are not counted. 'settled' is when the script run that the
click started has ended (no running indicator).

Every press is uncached: each repeat opens the page in a fresh session through a deep link
with one input changed (06: wq, Transformer: the labels of window 0, the check page: another
bundled file, or K). The first press on a page is a warm-up and is reported on its own
("first press"): it also pays the server's first import of the run panel, the experiment and
its report. Page 08's run takes no input, so only its first press is uncached: that press
is its figure (one a round). Clearing Streamlit's caches before each press, as this bench
once did, also dropped the server's runtime and its warm pool: every such "press" then
waited for a new pool (4.6 s), which no visitor ever sees.
The peak memory of the server's process tree is read during the warm-up presses only: the
reading itself takes CPU on the same two cores as the click it would be timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench import ROOT, exit_on_sigterm, loadavg, stats
from bench.cold_start import (
    _browser,
    free_port,
    start_server,
    stop_server,
    wait_healthy,
)
from bench.report import Goal, Section, duration, megabytes, now, spread
from pclab.runners import memory
from pclab.ui import i18n

# issue 35: page 06 <= 0.3 s, the Full Transformer <= 1.0 s, the check page's plain examples
# <= 1.0 s and its Hugging Face Trainer examples <= 3 s (through the warm pool)
GOALS_S = {
    "parameters": 0.3,
    "clipping": 0.5,
    "experiment": 1.0,
    "check": 1.0,
    "check_hf": 3.0,
}
# The check page's repeats: a different bundled file (or K) each press, so none is cached; P = 2
# throughout, the page's default (issue 35's figures are at the defaults).
PLAIN_EXAMPLES = (
    "correct_manual",
    "ddp_mean_of_local_means",
    "microbatch_means",
    "double_divide_by_k",
    "unnormalised_sum",
    "correct_ddp_no_sync",
    "clip_global_norm",
    "correct_float32",
    "own_microbatches",
    "adamw_steps_at_zero",
)
HF_EXAMPLES = ("hf_trainer", "hf_trainer_local_average", "hf_trainer_no_first_label")
SETTLED = """() => document.querySelectorAll(
    '[data-testid=stStatusWidgetRunningIcon], [data-testid=stAppRunningIcon],'
    + ' [data-testid*=keleton]'
).length === 0"""


@dataclass(frozen=True)
class Case:
    """One page's Run button, its verdict on screen, and how a repeat changes its input."""

    path: str
    button_key: str  # catalogue key of the Run button's text
    result_key: str  # catalogue key of a text that appears only with the run's result
    result_selector: str  # where that text appears
    query: str | None  # a deep-link parameter that changes the run's input, or None

    def query_for(self, i: int) -> str:
        if self.query == "par_wq":
            return f"?par_wq={0.25 + 0.01 * i:.2f}"  # default 0.5; any value in [-5, 5]
        if self.query == "exp_labels0":
            return f"?exp_labels0={39 - (i % 39)}"  # default 40; window 0 holds 95
        if self.query == "chk_example":
            return f"?chk_example={PLAIN_EXAMPLES[i % len(PLAIN_EXAMPLES)]}&chk_accum=2"
        if self.query == "chk_hf":  # 3 files x K in (2, 3, 1): nine different runs
            accum = (2, 3, 1)[(i // len(HF_EXAMPLES)) % 3]
            return f"?chk_example={HF_EXAMPLES[i % len(HF_EXAMPLES)]}&chk_accum={accum}"
        return ""


CASES = {
    "parameters": Case(
        "parameters",
        "parameters.run.button",
        "parameters.run.agree_all",
        '[data-testid="stAlert"]',
        "par_wq",
    ),
    "clipping": Case(
        "clipping", "clipping.run_button", "clipping.run_agree", '[data-testid="stAlert"]', None
    ),
    "experiment": Case(
        "experiment",
        "experiment.run.button",
        "experiment.zero.skip",
        '[data-testid="stMetric"]',
        "exp_labels0",
    ),
    "check": Case(
        "check-trainer",
        "check.run.button",
        "check.results.heading",
        '[data-testid="stHeading"]',
        "chk_example",
    ),
    "check_hf": Case(
        "check-trainer",
        "check.run.button",
        "check.results.heading",
        '[data-testid="stHeading"]',
        "chk_hf",
    ),
}


def _text(key: str) -> str:
    """The catalogue's English text up to its first placeholder: what the page shows."""
    return i18n.text("en", key).split("{")[0].strip()


ARM = """([selector, text]) => {
    window.__pcl = {click: null, result: null};
    document.addEventListener('click', () => {
        if (window.__pcl.click === null) window.__pcl.click = performance.now();
    }, {capture: true, once: true});
    const look = () => {
        const hit = [...document.querySelectorAll(selector)]
            .some(e => e.textContent.includes(text));
        if (hit) { window.__pcl.result = performance.now(); return; }
        requestAnimationFrame(look);
    };
    requestAnimationFrame(look);
}"""


def press(tab, case: Case, timeout_s: float = 240.0) -> dict:
    """Press Run on a settled page; seconds from the click to the verdict and to settled."""
    tab.evaluate(ARM, [case.result_selector, _text(case.result_key)])
    button = tab.get_by_role("button", name=_text(case.button_key))
    button.click()
    tab.wait_for_function(
        "() => window.__pcl.result !== null", timeout=timeout_s * 1000, polling=50
    )
    tab.wait_for_function(SETTLED, timeout=timeout_s * 1000)
    settled = tab.evaluate("() => performance.now()")
    timing = tab.evaluate("() => window.__pcl")
    return {
        "result_s": (timing["result"] - timing["click"]) / 1000,
        "settled_s": (settled - timing["click"]) / 1000,
    }


def settle(tab, timeout_s: float = 120.0) -> None:
    tab.wait_for_selector('[data-testid="stAppViewContainer"] h1', timeout=timeout_s * 1000)
    for _ in range(2):
        tab.wait_for_function(SETTLED, timeout=timeout_s * 1000)
        tab.wait_for_timeout(200)


class TreeSampler(threading.Thread):
    """Peak PSS and RSS of a process and all its descendants, every `interval_s`, except while
    `paused` is set: reading every process's smaps_rollup ten times a second took 0.3 s of CPU
    in a 1.6 s Transformer press on two cores, time the measured click then waited for."""

    def __init__(self, root: int, interval_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root, self.interval_s = root, interval_s
        self.peak_pss_kb = self.peak_rss_kb = 0
        self.torchrun_seen = False  # a cold launch (torchrun's agent) ran in the tree
        self.done = threading.Event()
        self.paused = threading.Event()

    def sample(self) -> tuple[int, int]:
        tree = [self.root, *memory.descendants(self.root)]
        for pid in tree[1:]:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    self.torchrun_seen |= b"torch.distributed.run" in f.read()
            except OSError:
                continue
        return memory.tree_kb(tree), memory.tree_kb(tree, "rss")

    def run(self) -> None:
        while not self.done.wait(self.interval_s):
            if self.paused.is_set():
                continue
            pss, rss = self.sample()
            self.peak_pss_kb, self.peak_rss_kb = (
                max(self.peak_pss_kb, pss),
                max(self.peak_rss_kb, rss),
            )


def checkout(ref: str) -> Path:
    """The project at git `ref`, exported beside this one (the "before" rows)."""
    target = Path(tempfile.gettempdir()) / f"pcl-bench-before-{ref}"
    if not (target / "app.py").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", ref], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def measure(
    pages: list[str],
    repeats: int,
    pool: str | None,
    root: Path | None = None,
    options: tuple[str, ...] = (),
) -> dict:
    """`repeats` uncached presses per page (after one warm-up press) on one fresh server of
    the checkout `root` (default: this one), started with extra `options` if any (an A/B of
    a config.toml setting: ("--runner.postScriptGC", "true"))."""
    opened, reason = _browser()
    if not opened:
        return {"error": reason}
    playwright, browser = opened
    env = {name: "" for name in os.environ if name.startswith("PCL_")}  # the defaults...
    if pool is not None:  # ...unless a row asks
        env["PCL_WARM_POOL"] = "1" if pool == "on" else "0"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(port, env=env, options=options, root=root)
    out: dict = {"pool": pool or "default", "pages": {}, "load_start": loadavg()}
    sampler = TreeSampler(server.pid)
    try:
        if not wait_healthy(server, url):
            return {"error": "the server never became healthy"}
        sampler.start()
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
        tab = context.new_page()
        tab.set_default_timeout(240_000)
        for page in pages:
            case = CASES[page]
            rows = []
            for i in range(repeats + 1 if case.query else 1):
                tab.goto(f"{url}/{case.path}{case.query_for(i)}")
                settle(tab)
                if i > 0:  # the timed presses; the warm-up press is metered
                    sampler.paused.set()
                try:
                    rows.append(press(tab, case))
                finally:
                    sampler.paused.clear()
            # a page whose run takes no input: its first press is its only uncached one
            out["pages"][page] = {"first": rows[0], "presses": rows[1:] or rows}
        context.close()
        out["server_kb"] = memory.rss_kb(server.pid)
    finally:
        sampler.done.set()
        stop_server(server)
        browser.close()
        playwright.stop()
    out["peak_tree_pss_kb"], out["peak_tree_rss_kb"] = sampler.peak_pss_kb, sampler.peak_rss_kb
    out["load_end"] = loadavg()
    return out


def visitors(
    pages: list[str],
    repeats: int,
    up_s: float = 10.0,
    delay_s: float = 1.5,
    home_first: bool = False,
    serve: bool = False,
) -> dict:
    """A visitor who clicks at once: each press in a fresh browser context (a new session and
    a cold browser cache, as a stranger's first visit), opened through a deep link with one
    input changed, Run pressed `delay_s` after the page's load event (or as soon as the button
    is there, if later), on one server left alone for `up_s` after it became healthy (no page
    opened before: whatever the server warms, it warms by itself). The first press on each
    page is that server's first on it; the others are later visitors' first presses."""
    opened, reason = _browser()
    if not opened:
        return {"error": reason}
    playwright, browser = opened
    env = {name: "" for name in os.environ if name.startswith("PCL_")}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(port, env=env, serve=serve)
    out: dict = {"pages": {}, "up_s": up_s, "delay_s": delay_s, "load_start": loadavg()}
    try:
        if not wait_healthy(server, url):
            return {"error": "the server never became healthy"}
        if home_first:
            context = browser.new_context()
            context.new_page().goto(url)
            context.close()
        time.sleep(up_s)
        for page in pages:
            case = CASES[page]
            rows = []
            for i in range(repeats):
                context = browser.new_context(
                    viewport={"width": 1400, "height": 1000}, locale="en-US"
                )
                tab = context.new_page()
                tab.set_default_timeout(240_000)
                try:
                    tab.goto(f"{url}/{case.path}{case.query_for(i)}")
                    tab.wait_for_timeout(delay_s * 1000)
                    tab.get_by_role("button", name=_text(case.button_key)).wait_for()
                    rows.append(press(tab, case))
                finally:
                    context.close()
            out["pages"][page] = rows
    finally:
        stop_server(server)
        browser.close()
        playwright.stop()
    out["load_end"] = loadavg()
    return out


# (variant, checkout, PCL_WARM_POOL) - "before" is the commit given as PCL_BENCH_BEFORE
VARIANTS = {
    "default": ("after", None),
    "off": ("after", "off"),
    "before-on": ("before", "on"),
    "before-default": ("before", None),
}
NAMES = {
    "default": "now, default settings (warm pool)",
    "off": "now, `PCL_WARM_POOL=0` (cold torchrun)",
    "before-on": "before, `PCL_WARM_POOL=1` (then opt-in)",
    "before-default": "before, default settings (then cold torchrun)",
}


def run(quick: bool = False, repeats: int | None = None) -> Section:
    from bench import child_json

    repeats = repeats or (3 if quick else 5)
    rounds = 1 if quick else 2
    before = os.environ.get("PCL_BENCH_BEFORE", "")
    section = Section(
        "clicks",
        "Click to result in Chromium (real server, uncached runs)",
        ["page", "server", "click → verdict: median (min–max)", "→ settled", "first press", "n"],
        load_start=loadavg(),
        started=now(),
    )
    began = time.perf_counter()
    pages = list(CASES)
    variants = ["default"] if quick else ["default", "off"]
    if before:
        variants += ["before-on", "before-default"]
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(rounds):  # every variant once per round: they share the box's load
        for variant in variants:
            which, pool = VARIANTS[variant]
            args = ["--repeats", str(repeats), "--pages", ",".join(pages)]
            args += ["--pool", pool] if pool else []
            args += ["--root", str(checkout(before))] if which == "before" else []
            runs[variant].append(child_json("bench.clicks", args, timeout_s=2400))
    for variant, rounds_data in runs.items():
        good = [d for d in rounds_data if "error" not in d]
        for bad in (d for d in rounds_data if "error" in d):
            section.notes.append(f"{NAMES[variant]}: a round failed: {bad['error']}")
        if not good:
            continue
        for page in pages:
            got = [d["pages"][page] for d in good if page in d.get("pages", {})]
            if not got:
                continue
            verdicts = [p["result_s"] for g in got for p in g["presses"]]
            settled = [p["settled_s"] for g in got for p in g["presses"]]
            firsts = [g["first"]["result_s"] for g in got]
            section.rows.append(
                [
                    f"`{page}`",
                    NAMES[variant],
                    spread(stats(verdicts)),
                    duration(statistics.median(settled)),
                    " / ".join(duration(f) for f in firsts),
                    str(len(verdicts)),
                ]
            )
            if variant == "default":
                median = statistics.median(verdicts)
                section.goals.append(
                    Goal(
                        f"`{page}`: click → verdict, uncached, median",
                        duration(median),
                        f"≤ {duration(GOALS_S[page])}",
                        median <= GOALS_S[page],
                    )
                )
        pss = max(d["peak_tree_pss_kb"] for d in good)
        rss = max(d["peak_tree_rss_kb"] for d in good)
        section.notes.append(
            f"{NAMES[variant]}: peak memory of the server's whole process tree during the "
            f"warm-up presses {megabytes(pss)} PSS ({megabytes(rss)} summed RSS, which counts "
            "the pages a zygote shares with its ranks once per process); the meter rests during "
            "the timed presses (its reading costs CPU the click would wait for)."
        )
    loads = [d.get("load_start", [None])[0] for v in runs.values() for d in v if "error" not in d]
    loads = [x for x in loads if x is not None]
    section.notes += [
        f"{repeats} uncached presses per page per round after one warm-up press ('first press', "
        f"one per round), {rounds} round(s), every server variant once per round, in turn. Each "
        "press is in a fresh session opened through a deep link with one input changed (page "
        "08, whose run takes no input: its first press only); each variant runs on a fresh "
        "server. The clock "
        "runs inside the page, from the click to the verdict."
        + (
            f" 1-minute load average when each server started: {min(loads):.1f}–{max(loads):.1f}."
            if loads
            else ""
        ),
    ]
    if before:
        section.notes.append(
            f"'before' rows: the project at `{before}` (the commit this work started from), "
            "exported with git archive and measured by this same harness."
        )
    visits = child_json(
        "bench.clicks",
        ["--visitors", "--serve", "--repeats", str(repeats), "--pages", ",".join(pages)],
        timeout_s=2400,
    )
    _visitor_rows(section, visits)
    section.data = {
        "runs": runs,
        "repeats": repeats,
        "rounds": rounds,
        "before": before,
        "visitors": visits,
    }
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section


# issue 46: a session's first press at the later presses' figure, on a server up 10 s
FIRST_PRESS_GOALS_S = {"parameters": 0.4, "experiment": 1.1, "clipping": 0.5}
VISITOR = "`pclab serve`, a fresh tab per press, Run 1.5 s after the page loads (server up 10 s)"


def _visitor_rows(section: Section, visits: dict) -> None:
    """The visitor who clicks at once: the server's first press on each page beside the
    later visitors' (each their session's first), with the first-press goals."""
    if "error" in visits:
        section.notes.append(f"the visitors' round failed: {visits['error']}")
        return
    for page, presses in visits["pages"].items():
        first, later = presses[0]["result_s"], [p["result_s"] for p in presses[1:]]
        section.rows.append(
            [
                f"`{page}`",
                VISITOR,
                spread(stats(later)) if later else "—",
                duration(statistics.median(p["settled_s"] for p in presses)),
                duration(first),
                str(len(presses)),
            ]
        )
        if page in FIRST_PRESS_GOALS_S:
            goal = FIRST_PRESS_GOALS_S[page]
            section.goals.append(
                Goal(
                    f"`{page}`: a fresh server's first press, visitor clicking at once",
                    duration(first),
                    f"≤ {duration(goal)}",
                    first <= goal,
                )
            )
    section.notes.append(
        f"{VISITOR}: each press is a new browser context (a stranger's first visit: a new "
        "session, an empty browser cache) opened through a deep link with one input changed; "
        "no page was opened before the first one, so whatever the server warms it warms by "
        "itself as it starts (pclab/ui/warm_start.py). 'first press' is that server's first "
        "on the page, the median the later visitors' (page 08's run takes no input: its later "
        "presses are its stored result)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.clicks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pages", default=",".join(CASES))
    parser.add_argument("--pool", choices=("on", "off"), default=None)
    parser.add_argument("--root", type=Path, default=None, help="another checkout to serve")
    parser.add_argument(
        "--visitors", action="store_true", help="fresh tab per press, pressed at once"
    )
    parser.add_argument("--up-s", type=float, default=10.0, help="server idle before (visitors)")
    parser.add_argument("--home-first", action="store_true", help="one home visit, then idle")
    parser.add_argument("--serve", action="store_true", help="start the server as pclab serve")
    args = parser.parse_args(argv)
    pages = [p for p in args.pages.split(",") if p]
    if args.visitors:
        print(
            json.dumps(
                visitors(
                    pages, args.repeats, args.up_s, home_first=args.home_first, serve=args.serve
                )
            )
        )
        return 0
    print(json.dumps(measure(pages, args.repeats, args.pool, args.root)))
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
