"""The server's background preload (ui/preload.py), on and off: first renders a visitor meets.

    python -m bench --only preload [--repeats N]
    python -m bench.preload --child 8 sections/04_limits.py,sections/07_validation.py

Each case is a fresh Python process running app.py in AppTest (the server side only: no
browser shares the CPU, as on a real host), with PCL_PRELOAD=1 and =0 alternately:

    reads the first page 8 s, then opens 04 and 07   the preload has finished
    opens 01 after 3.2 s                             the preload has just started: the worst
                                                     moment to need a core
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench import child_json, loadavg, stats
from bench.report import Section, duration, now, spread

CASES = (
    (8.0, ("pclab/sections/04_limits.py", "pclab/sections/07_validation.py")),
    (3.2, ("pclab/sections/01_denominator.py",)),
)


def child(idle_s: float, pages: list[str]) -> dict:
    """app.py's first page, `idle_s` of reading, then the first render of each page."""
    from streamlit.testing.v1 import AppTest

    from bench import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    time.sleep(idle_s)
    out = {}
    for page in pages:
        began = time.perf_counter()
        at.switch_page(page).run()
        out[page] = time.perf_counter() - began
    return out


def run(quick: bool = False, repeats: int | None = None) -> Section:
    repeats = repeats or (1 if quick else 3)
    section = Section(
        "preload",
        "Background preload of torch, pandas, altair (`PCL_PRELOAD`)",
        ["first render (AppTest, server side)", "preload on", "preload off"],
        load_start=loadavg(),
        started=now(),
    )
    began = time.perf_counter()
    samples: dict[tuple[float, str, str], list[float]] = {}
    errors = []
    for _ in range(repeats):
        for idle_s, pages in CASES:
            for setting in ("1", "0"):  # alternately, so both see the same load
                env = dict(os.environ, PCL_PRELOAD=setting)
                got = child_json(
                    "bench.preload", ["--child", str(idle_s), ",".join(pages)], 600, env
                )
                if "error" in got:
                    errors.append(got["error"])
                    continue
                for page, seconds in got.items():
                    samples.setdefault((idle_s, page, setting), []).append(seconds)
    for idle_s, pages in CASES:
        for page in pages:
            on, off = samples.get((idle_s, page, "1"), []), samples.get((idle_s, page, "0"), [])
            label = f"`{page}`, opened {duration(idle_s)} after the first page"
            section.rows.append(
                [label, spread(stats(on)) if on else "—", spread(stats(off)) if off else "—"]
            )
    if errors:
        section.notes.append(f"{len(errors)} case(s) failed: {errors[0]}")
    section.notes.append(
        f"{repeats} run(s) per case, on and off alternately, each in a fresh process. The preload "
        "starts 3 s after the first script run; a page that needs a module it is importing waits "
        "for it on Python's import lock."
    )
    section.data = {"samples": {f"{k[0]}|{k[1]}|{k[2]}": v for k, v in samples.items()}}
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.preload", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--child", nargs=2, metavar=("IDLE_S", "PAGES"), required=True)
    args = parser.parse_args(argv)
    print(json.dumps(child(float(args.child[0]), args.child[1].split(","))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
