"""What each test costs the box, in CPU-seconds, and the floor that puts under the suite.

    python -m pytest -n 0 -p bench.suite_cpu --suite-cpu /tmp/cpu.json tests/e2e
    python -m bench.suite_cpu /tmp/cpu.json [more.json ...]     # per-file table and the floor

The plugin reads the whole box's busy time from /proc/stat (user, nice, system, irq, softirq,
steal) before and after each test's set-up, call and tear-down, so a test is charged for every
process it makes work: its ranks, servers, Chromium, a framework's compiler. `/usr/bin/time`
or a process's own rusage misses whatever left its parent. The figures mean something only
with one test at a time (`-n 0`) on a box with nothing else running: under xdist, or beside
another job, a test is charged for its neighbours' work too.

The floor: the suite's work spread perfectly over the box's cores, nothing waiting, is
sum(CPU-seconds) / cores. No scheduling (more xdist workers, another order of files) can bring
the suite's wall time below it; only less work can.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from bench import loadavg

BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (idle, iowait are not)


def busy_cpu_seconds(stat: str = "/proc/stat") -> float:
    """CPU-seconds every core of the box has spent busy since boot."""
    try:
        first = Path(stat).read_text().splitlines()[0].split()
    except OSError as error:
        raise RuntimeError(f"{stat} cannot be read ({error}): the plugin needs Linux") from None
    ticks = sum(int(first[1 + i]) for i in BUSY_FIELDS)
    return ticks / os.sysconf("SC_CLK_TCK")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--suite-cpu",
        metavar="PATH",
        help="bench.suite_cpu: write each test's CPU-seconds and wall seconds to PATH (JSON)",
    )


class Recorder:
    """Charges each test's protocol (set-up, call, tear-down) with the box's busy time; a
    session fixture's start is charged to the first test that asks for it, as in pytest's
    own --durations."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tests: list[dict] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        cpu, wall = busy_cpu_seconds(), time.perf_counter()
        yield
        self.tests.append(
            {
                "test": item.nodeid,
                "cpu_s": round(busy_cpu_seconds() - cpu, 2),
                "wall_s": round(time.perf_counter() - wall, 2),
            }
        )

    def pytest_sessionfinish(self) -> None:
        record = {"cores": os.cpu_count(), "load_at_end": loadavg(), "tests": self.tests}
        self.path.write_text(json.dumps(record, indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--suite-cpu")
    if not path:
        return
    if getattr(config.option, "numprocesses", None):
        raise pytest.UsageError(
            "--suite-cpu charges each test with the whole box's CPU: run one test at a time "
            "(-n 0), or each test pays for the other worker's"
        )
    busy_cpu_seconds()  # fail at start, not at the first test, where /proc/stat is missing
    config.pluginmanager.register(Recorder(Path(path)), "suite_cpu_recorder")


def by_file(tests: list[dict]) -> dict[str, dict]:
    """{test file: {"cpu_s", "wall_s", "tests"}}, the costliest file first."""
    files: dict[str, dict] = defaultdict(lambda: {"cpu_s": 0.0, "wall_s": 0.0, "tests": 0})
    for test in tests:
        entry = files[test["test"].split("::")[0]]
        entry["cpu_s"] += test["cpu_s"]
        entry["wall_s"] += test["wall_s"]
        entry["tests"] += 1
    return dict(sorted(files.items(), key=lambda kv: -kv[1]["cpu_s"]))


def table(records: list[dict], top: int = 25) -> str:
    tests = [t for record in records for t in record["tests"]]
    if not tests:
        raise ValueError("the records hold no test: was the plugin given --suite-cpu?")
    cores = max(record["cores"] or 1 for record in records)
    files = by_file(tests)
    cpu = sum(t["cpu_s"] for t in tests)
    wall = sum(t["wall_s"] for t in tests)
    lines = [
        f"{len(tests)} tests in {len(files)} files: {cpu:,.0f} CPU-seconds in {wall:,.0f} s "
        f"one at a time; on {cores} cores the suite cannot end before {cpu / cores:,.0f} s "
        "(the floor: that work spread perfectly, nothing waiting)",
        "",
        "| file | CPU-s | wall s | tests |",
        "|---|---|---|---|",
    ]
    for name, entry in list(files.items())[:top]:
        lines.append(
            f"| `{name}` | {entry['cpu_s']:.1f} | {entry['wall_s']:.1f} | {entry['tests']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.suite_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("records", nargs="+", type=Path, help="files written by --suite-cpu")
    parser.add_argument("--top", type=int, default=25, help="files to list (default 25)")
    args = parser.parse_args(argv)
    try:
        records = [json.loads(path.read_text()) for path in args.records]
        print(table(records, args.top))
    except (OSError, ValueError, KeyError) as error:
        print(f"python -m bench.suite_cpu: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
