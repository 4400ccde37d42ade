"""Page reruns with AppTest: milliseconds per rerun after a widget change, per page.

    python -m bench --only pages [--quick] [--repeats N]
    python -m bench.pages --child sections/02_ledger.py --repeats 15   # one page, JSON line

Each page is measured in its own fresh Python process (`--child`), so what one page imports
never hides another's cost. The child renders app.py, switches to the page (the "first
render": its imports and caches), then changes one widget back and forth and times each
`AppTest.run()` - the script rerun plus AppTest's own bookkeeping, which a browser replaces
with a websocket round trip. The widget is the page's first number input or slider in the
main area (else a toggle, checkbox or selectbox); a page without one switches the language.
Afterwards the child reports whether `torch` was imported: a page that does not need it
must not pay its ~2-4 s import and ~200 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench import ROOT, child_json, loadavg, stats
from bench.report import Goal, Section, duration, now, spread

GOAL_MS = 100.0
# Pages whose figures are torch computations (core.limits, core.coverage_checks, the model).
NEEDS_TORCH = {"pclab/sections/04_limits.py", "pclab/sections/07_validation.py"}
HEAVY = ("torch", "torch._dynamo", "pandas", "altair", "numpy", "tokenizers", "safetensors")
QUICK_PAGES = ("pclab/sections/home.py", "pclab/sections/02_ledger.py")
# Extra rows at large inputs: (page, widget values set before it renders, label).
LARGE_INPUTS = (
    (
        "pclab/sections/02_ledger.py",
        {"ledger_n_a": 5000, "ledger_n_b": 5000},
        "5,000 + 5,000 tokens",
    ),
)


def registered_pages() -> list[str]:
    """The page files the app registers (pclab.ui.pages.PAGES, which app.py navigates), in
    order."""
    from pclab.ui.pages import PAGES

    return [page.file for page in PAGES]


def _widgets(block) -> list:
    from streamlit.testing.v1.element_tree import Widget

    found = []
    for child in getattr(block, "children", {}).values():
        if isinstance(child, Widget):
            found.append(child)
        found.extend(_widgets(child))
    return found


def _changer(at):
    """(description, function that flips the chosen widget to its other value)."""
    widgets = _widgets(at.main)
    order = ("number_input", "slider", "toggle", "checkbox", "selectbox")
    for kind in order:
        for w in widgets:
            if w.type != kind or not w.key:
                continue
            if kind in ("number_input", "slider") and isinstance(w.value, int | float):
                step = w.step or 1
                up = w.max is None or w.value + step <= w.max
                values = (w.value, w.value + step if up else w.value - step)
                return f"{kind} `{w.key}`", lambda i, k=w.key, t=kind, v=values: getattr(at, t)(
                    key=k
                ).set_value(v[i % 2])
            if kind in ("toggle", "checkbox"):
                start = bool(w.value)
                return f"{kind} `{w.key}`", lambda i, k=w.key, t=kind, s=start: getattr(at, t)(
                    key=k
                ).set_value(s if i % 2 == 0 else not s)
            if kind == "selectbox" and len(w.options) > 1:
                first = w.index or 0
                other = 1 if first == 0 else 0
                return f"selectbox `{w.key}`", lambda i, k=w.key, a=first, b=other: at.selectbox(
                    key=k
                ).select_index(a if i % 2 == 0 else b)

    def language(i: int) -> None:
        at.session_state["lang"] = "en" if i % 2 == 0 else "zh"

    return "language (session_state `lang`)", language


def child(page: str, repeats: int, preset: dict | None = None) -> dict:
    """Render one page in this (fresh) process and time reruns after a widget change;
    `preset` sets widget values (by key) before the page first renders."""
    from streamlit import config
    from streamlit.runtime.scriptrunner.script_cache import ScriptCache
    from streamlit.testing.v1 import AppTest, app_test, local_script_runner

    config.set_option("client.showErrorDetails", "full")
    # A server compiles app.py and each page once (one ScriptCache for its lifetime); AppTest
    # makes a new cache, so a new compile of both, on every run. Share one, as the server
    # does, and time what AppTest alone would add.
    shared = ScriptCache()
    local_script_runner.ScriptCache = app_test.ScriptCache = lambda: shared
    began = time.perf_counter()
    fresh = ScriptCache()
    fresh.get_bytecode(str(ROOT / "app.py"))
    fresh.get_bytecode(str(ROOT / page))
    compile_s = time.perf_counter() - began
    began = time.perf_counter()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    app_s = time.perf_counter() - began
    for key, value in (preset or {}).items():
        at.session_state[key] = value
    began = time.perf_counter()
    at.switch_page(page).run()
    first_s = time.perf_counter() - began
    if at.exception:
        return {"page": page, "error": str(at.exception[0].message)[:300]}
    widget, change = _changer(at)
    change(1)  # values 1, 0, 1, 0 ...: every rerun sees a new value
    at.run()  # the first change of a widget may build caches; it is not a typical rerun
    samples = []
    for i in range(repeats):
        change(i)
        began = time.perf_counter()
        at.run()
        samples.append(time.perf_counter() - began)
        if at.exception:
            return {"page": page, "error": str(at.exception[0].message)[:300]}
    return {
        "page": page,
        "widget": widget,
        "app_s": app_s,
        "first_render_s": first_s,
        "apptest_compile_s": compile_s,
        "rerun_s": stats(samples),
        "imported": [m for m in HEAVY if m in sys.modules],
    }


def run(quick: bool = False, repeats: int | None = None, pages: list[str] | None = None) -> Section:
    repeats = repeats or (3 if quick else 15)
    pages = pages or (list(QUICK_PAGES) if quick else registered_pages())
    section = Section(
        "pages",
        "Page reruns (AppTest)",
        ["page", "widget changed", "rerun: median (min–max)", "first render", "torch imported"],
        load_start=loadavg(),
        started=now(),
    )
    began = time.perf_counter()
    results = []
    cases = [(page, None, "") for page in pages] + ([] if quick else list(LARGE_INPUTS))
    for page, preset, label in cases:
        args = ["--child", page, "--repeats", str(repeats)] + (
            ["--preset", json.dumps(preset)] if preset else []
        )
        # PCL_PRELOAD=0: what a page imports by itself, not what the server preloads (ui/preload.py)
        result = child_json(
            "bench.pages", args, timeout_s=600, env=dict(os.environ, PCL_PRELOAD="0")
        )
        result.setdefault("page", page)
        result["case"] = f"`{page}`" + (f" at {label}" if label else "")
        results.append(result)
        if "error" in result:
            section.rows.append([result["case"], "error: " + result["error"], "—", "—", "—"])
            continue
        torch = "torch" in result["imported"]
        expected = page in NEEDS_TORCH
        flag = ("yes" if torch else "no") + (
            "" if torch == expected else " (**unexpected**)" if torch else ""
        )
        section.rows.append(
            [
                result["case"],
                result["widget"],
                spread(result["rerun_s"]),
                duration(result["first_render_s"]),
                flag,
            ]
        )
    measured = [r for r in results if "error" not in r]
    for r in measured:
        ms = r["rerun_s"]["median"] * 1000
        section.goals.append(
            Goal(f"rerun {r['case']}", f"{ms:.0f} ms", f"≤ {GOAL_MS:.0f} ms", ms <= GOAL_MS)
        )
    stray = [
        r["page"] for r in measured if "torch" in r["imported"] and r["page"] not in NEEDS_TORCH
    ]
    section.goals.append(
        Goal(
            "pages that do not need torch do not import it",
            "imported by " + ", ".join(f"`{p}`" for p in stray) if stray else "none imports it",
            "none",
            not stray if measured else None,
        )
    )
    section.notes += [
        f"{repeats} reruns per page, each after flipping the named widget between two values; "
        "each page in a fresh process. 'first render' is switching to the page once app.py has "
        "rendered: its imports and first computations.",
        "Reruns share one compiled-script cache, as a Streamlit server does; AppTest by itself "
        "recompiles app.py and the page on every run, which would add "
        + (spread(stats([r["apptest_compile_s"] for r in measured])) if measured else "—")
        + " per rerun (magic + compile; the server never pays it after a page's first visit).",
        f"Pages expected to need torch (their figures are torch computations): "
        f"{', '.join(sorted(NEEDS_TORCH))}.",
    ]
    section.data = {"pages": results, "repeats": repeats}
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pages", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--child", metavar="PAGE", required=True, help="e.g. sections/02_ledger.py")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--preset", type=json.loads, default=None, help='widget values, e.g. {"ledger_n_a": 5000}'
    )
    args = parser.parse_args(argv)
    print(json.dumps(child(args.child, args.repeats, args.preset)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
