"""`python -m bench`: measure, print a table, rewrite BENCHMARKS.md.

    python -m bench                                  # every family; ~15 min on 2 cores
    python -m bench --only core,pages --repeats 5
    python -m bench --quick --only core --out /tmp/b.md   # seconds; what the smoke test runs
    python -m bench --wait-load 1.5                  # first wait (<= 10 min) for a quiet box
    python -m bench --render-only                    # re-render with the current bench/notes.md

Families: core (time per core call), pages (AppTest reruns), preload (first renders with
the server's background imports on and off), cold (streamlit run to a rendered page), runs
(experiments vs a no-op Gloo job, cached calls, memory), cli (`pclab run transformer
--json` beside a bare DDP-step torchrun), frameworks (each framework adapter's
trainer check, cold and warm, and its ranks' memory), clicks (Run pressed in Chromium to the
verdict on screen), load (8 visitors at once), soak (200 runs in a row), burst (10 Runs at
concurrency 8 against the memory budget, then a Run two minutes later), room (a live
room: 60 participants in 10 s, the presenter's view in Chromium), probe (issue 34's
hostile-visitor probe: every finding a pass/fail row; bench/probe.py). A partial run
rewrites only its own sections of the output file and keeps the others.

    python -m bench --only clicks --before 031aefd   # also serve that commit: "before" rows
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench import ROOT, exit_on_sigterm, loadavg, report

FAMILIES = report.ORDER  # every family, in the order its section appears


def _families(text: str) -> list[str]:
    chosen = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"--only {text!r}: expected a comma list of {', '.join(FAMILIES)}"
        )
    return chosen


def wait_for_quiet(limit: float, max_wait_s: float = 600.0) -> None:
    """Sleep until the 1-minute load average is below `limit` (or max_wait_s has passed)."""
    deadline = time.monotonic() + max_wait_s
    while loadavg()[0] >= limit and time.monotonic() < deadline:
        print(f"load average {loadavg()[0]:.2f} >= {limit}: waiting", file=sys.stderr, flush=True)
        time.sleep(20)


def measure(family: str, quick: bool, repeats: int | None) -> report.Section:
    if family == "core":
        from bench import core

        return core.run(quick, repeats)
    if family == "pages":
        from bench import pages

        return pages.run(quick, repeats)
    if family == "preload":
        from bench import preload

        return preload.run(quick, repeats)
    if family == "cold":
        from bench import cold_start

        return cold_start.run(quick, repeats)
    if family == "clicks":
        from bench import clicks

        return clicks.run(quick, repeats)
    if family == "cli":
        from bench import cli

        return cli.run(quick, repeats)
    if family == "frameworks":
        from bench import frameworks

        return frameworks.run(quick, repeats)
    if family == "burst":
        from bench import burst

        return burst.run(quick, repeats)
    if family == "probe":
        from bench import probe

        return probe.run(quick, repeats)
    if family == "room":
        from bench import room

        return room.run(quick, repeats)
    if family in ("load", "soak"):
        from bench import hosted

        return (hosted.run_load if family == "load" else hosted.run_soak)(quick, repeats)
    from bench import runs

    return runs.run_section(quick, repeats)


def print_section(section: report.Section) -> None:
    load = f"{report.load_text(section.load_start)} -> {report.load_text(section.load_end)}"
    print(f"\n== {section.title}  (load {load})")
    widths = [
        max(len(str(r[i])) for r in [section.columns, *section.rows])
        for i in range(len(section.columns))
    ]
    for row in [section.columns, *section.rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    for goal in section.goals:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[goal.met]
        print(f"goal: {goal.name}: {goal.measured} (target {goal.target}) -> {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", type=_families, default=list(FAMILIES), help="comma list of " + ",".join(FAMILIES)
    )
    parser.add_argument("--quick", action="store_true", help="few repeats, default inputs only")
    parser.add_argument("--repeats", type=int, default=None, help="samples per measurement")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "BENCHMARKS.md", help="file to (re)write"
    )
    parser.add_argument(
        "--wait-load", type=float, default=None, metavar="X", help="first wait for load < X"
    )
    parser.add_argument(
        "--before",
        default=None,
        metavar="REF",
        help="clicks: also measure this git commit, exported beside the checkout",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: re-render --out with the current notes",
    )
    args = parser.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.before:
        os.environ["PCL_BENCH_BEFORE"] = args.before
    if args.wait_load is not None:
        wait_for_quiet(args.wait_load)
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.render_only:
        report.write([], args.out, command.strip())
        print(f"re-rendered {report.relative(args.out)}")
        return 0
    sections = []
    for family in args.only:
        section = measure(family, args.quick, args.repeats)
        print_section(section)
        sections.append(section)
        report.write(
            sections, args.out, command.strip()
        )  # after each family: a crash keeps the rest
    print(f"\nwrote {report.relative(args.out)}")
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
