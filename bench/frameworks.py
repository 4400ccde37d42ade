"""Frameworks, measured: what one trainer check of each framework adapter costs, cold, through
the warm pool, and through a warm pool whose zygote has imported the framework, and the peak
memory of each of its ranks.

    python -m bench --only frameworks        # every adapter that can run here, ~5 min
    python -m bench.frameworks --child cold|pooled|preloaded --adapters a,b   # one JSON line

Every adapter the framework table lists (pclab.experiments.trainer_check.frameworks.SETTINGS)
whose package this Python has, and one whose package lives in an environment of its own
(bench/framework_env.py: litgpt) under that environment's Python; beside them the bundled
correct trainer with no framework (correct_manual.py), the baseline. Each is checked as the
table records it (P = 2, K = 2, five scenarios; OpenCLIP's coupled rows K = 1, two), once
per mode, with bench.runs.timed_checks: a child process per Python and mode. An adapter
that cannot run here keeps its last row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench import ROOT, child_json, framework_env, loadavg, report
from bench.report import Goal, Section, duration, megabytes, now
from pclab.experiments.trainer_check import examples, frameworks

PRELOAD = frameworks.PRELOAD  # what a zygote can import ahead for each package's adapters
MODES = ("cold", "pooled", "preloaded")
BASELINE = "correct_manual"  # the bundled correct trainer: no framework to import
POOL_GOAL_S = 3.0  # issue 23: a framework row run live from the page, near 3 s per click
COLUMNS = [
    "trainer file (P = 2, K = 2)",
    "framework",
    "verdict",
    "check, cold (torchrun)",
    "warm pool",
    "warm pool, framework preloaded",
    "peak per rank, MB PSS / RSS: cold · warm · preloaded",
    "Python (when)",
]
NOTES = [
    "One check per row and mode: the five scenarios, each running train_step twice on every "
    "rank (the file's optimizer, then SGD at learning rate 1 for the weights), as `pclab check "
    "FILE --json` and the framework table (P = 2, K = 2) run it. The verdict is the check's "
    "(`different` is the measured finding, not a failure).",
    "Cold: `EXPERIMENT.run` in a fresh runtime: torchrun, two Python processes that import "
    "torch and the framework, then the check. Warm pool: the same call with the pool on, "
    "started and idle first (its start-up not counted); its zygote has imported torch and the "
    "lab's workers, not the frameworks, so each rank still imports its framework. Preloaded: "
    "the zygote also imports the framework's modules (frameworks.PRELOAD), as a "
    "server could for the framework rows it runs live.",
    "Peak per rank: the larger of the two ranks' sampled peaks (every 50 ms, "
    "pclab.runners.memory): PSS counts a page shared by n processes 1/n in each, RSS in full "
    "(a warm rank shares the zygote's pages: torch, and the framework when preloaded).",
    "A framework that cannot share the lab's environment (litgpt) runs under its own Python "
    "(`python -m bench.framework_env litgpt` builds it); a row whose Python is not here keeps "
    "its last measurement, with its date.",
]


def plan() -> dict[str, list[str]]:
    """Python -> the adapters (file stems) it checks: this one's installed packages, and each
    package of an environment of its own that exists (framework_env.python_for)."""
    by_python: dict[str, list[str]] = {sys.executable: [BASELINE]}
    for s in frameworks.SETTINGS:
        if not s.adapter:
            continue
        python = sys.executable if frameworks.installed_version(s.package) else None
        if python is None and s.package in framework_env.OWN_ENVIRONMENT:
            found = framework_env.python_for(s.package)
            python = str(found) if found else None
        if python is not None:
            by_python.setdefault(python, []).append(s.adapter)
    return by_python


def measure_here(mode: str, adapters: list[str]) -> dict:
    """This Python's checks of `adapters` in one mode (a child process's whole job)."""
    from bench.runs import timed_checks

    cases = []
    for adapter in adapters:
        s = _setting(adapter)
        version = None if s is None else frameworks.installed_version(s.package)
        row = {"adapter": adapter, "version": version}
        accum = frameworks.ACCUM if s is None else s.accum  # as the table records it
        path = examples.path_of(adapter)  # an adapter, or the baseline of examples/trainers/
        cases.append((row, str(path), frameworks.WORLD_SIZE, accum))
    packages = {s.package for a in adapters if (s := _setting(a)) is not None}
    preload = (
        [m for p in sorted(packages) for m in PRELOAD.get(p, ())] if mode == "preloaded" else []
    )
    return timed_checks(mode != "cold", cases, tuple(preload))


def _setting(adapter: str):
    return next((s for s in frameworks.SETTINGS if s.adapter == adapter), None)


def _row(adapter: str, python: str, by_mode: dict[str, dict]) -> dict:
    s = _setting(adapter)
    versions = [r.get("version") for r in by_mode.values() if r.get("version")]
    return {
        "adapter": adapter,
        "framework": "none" if s is None else s.framework,
        "version": versions[0] if versions else None,
        "python": python,
        "measured": now(),
    } | by_mode


def _measure(quick: bool) -> tuple[list[dict], dict]:
    """Every planned adapter, one child process per Python and mode (quick: the baseline)."""
    rows, raw = [], {}
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # another Python: this checkout's packages
    planned = {sys.executable: [BASELINE]} if quick else plan()
    for python, adapters in planned.items():
        modes = {
            mode: child_json(
                "bench.frameworks",
                ["--child", mode, "--adapters", ",".join(adapters)],
                3600,
                env,
                python=python,
            )
            for mode in MODES
        }
        raw[python] = {m: {k: v for k, v in out.items() if k != "rows"} for m, out in modes.items()}
        for i, adapter in enumerate(adapters):
            failed = [{"error": out.get("error", "no row")} for out in modes.values()]
            by_mode = {
                m: out["rows"][i] if "rows" in out else failed[j]
                for j, (m, out) in enumerate(modes.items())
            }
            rows.append(_row(adapter, python, by_mode))
    return rows, raw


def _kept(rows: list[dict]) -> list[dict]:
    """The last run's rows of adapters not measured now (their package is not here)."""
    committed = ROOT / "BENCHMARKS.md"
    previous = report.parse(committed.read_text(encoding="utf-8")) if committed.is_file() else {}
    measured = {r["adapter"] for r in rows}
    old = previous.get("frameworks", {}).get("data", {}).get("rows", [])
    return [r for r in old if r["adapter"] not in measured and set(MODES) <= set(r)]


def _peak(row: dict) -> str:
    if not row.get("ok") or not row.get("rank_pss_kb"):
        return "—"
    pss, rss = max(row["rank_pss_kb"]), max(row["rank_rss_kb"])
    return f"{pss / 1024:.0f} / {rss / 1024:.0f}"


def _wall(row: dict) -> str:
    if row.get("ok"):
        return duration(row["wall_s"])
    return "failed: " + str(row.get("message") or row.get("error") or "not measured")[:80]


def _order(row: dict) -> int:
    stems = [BASELINE, *frameworks.ADAPTERS]
    return stems.index(row["adapter"]) if row["adapter"] in stems else len(stems)


def _goals(section: Section, rows: list[dict]) -> None:
    """The slowest framework check through the pool, as the server runs it and preloaded."""
    for mode, how in (("pooled", "as the server runs it"), ("preloaded", "framework preloaded")):
        walls = [r[mode]["wall_s"] for r in rows if r["adapter"] != BASELINE and r[mode].get("ok")]
        if walls:
            section.goals.append(
                Goal(
                    f"slowest framework check via the warm pool, {how}",
                    duration(max(walls)),
                    f"≤ {POOL_GOAL_S:g} s",
                    max(walls) <= POOL_GOAL_S,
                )
            )


def _pool_note(python: str, modes: dict) -> str | None:
    pool, preloaded = modes.get("pooled", {}), modes.get("preloaded", {})
    if not (pool.get("zygote_pss_kb") and preloaded.get("zygote_pss_kb")):
        return None
    which = "this Python" if python == sys.executable else python
    return (
        f"Warm pool of {which}: the zygote started in "
        f"{duration(pool['pool_start_s'])} and holds {megabytes(pool['zygote_pss_kb'])} PSS "
        f"({megabytes(pool['zygote_rss_kb'])} RSS); importing the frameworks it checks too, "
        f"{duration(preloaded['pool_start_s'])} and {megabytes(preloaded['zygote_pss_kb'])} PSS "
        f"({megabytes(preloaded['zygote_rss_kb'])} RSS)."
    )


def run(quick: bool = False, repeats: int | None = None) -> Section:
    """One run per adapter and mode (`repeats` is not used: a framework check is heavy)."""
    section = Section("frameworks", "Frameworks: one trainer check, cold and warm", COLUMNS)
    section.load_start, section.started = loadavg(), now()
    began = time.perf_counter()
    rows, raw = _measure(quick)
    rows = sorted(rows + _kept(rows), key=_order)
    for r in rows:
        version = "" if r["version"] is None else f" {r['version']}"
        here = "this one" if r["python"] == sys.executable else r["python"]
        section.rows.append(
            [
                f"`{r['adapter']}.py`",
                r["framework"] + version,
                r["cold"].get("status") or "—",
                *(_wall(r[m]) for m in MODES),
                " · ".join(_peak(r[m]) for m in MODES),
                f"{here} ({r['measured']})",
            ]
        )
    _goals(section, rows)
    section.notes += NOTES
    section.notes += [n for p, m in raw.items() if (n := _pool_note(p, m))]
    section.data = {"rows": rows, "raw": raw, "quick": quick}
    section.seconds = time.perf_counter() - began
    section.load_end = loadavg()
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.frameworks")
    parser.add_argument("--child", choices=MODES, required=True)
    parser.add_argument("--adapters", required=True, help="file stems, a,b")
    args = parser.parse_args(argv)
    print(json.dumps(measure_here(args.child, args.adapters.split(","))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
