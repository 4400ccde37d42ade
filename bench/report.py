"""BENCHMARKS.md: the machine, then one Markdown section per measurement family.

Each section sits between `<!-- bench:section KEY -->` and `<!-- /bench:section KEY -->` and
carries its raw numbers as JSON in a `<!-- bench:data KEY {...} -->` comment, so a partial
run (`python -m bench --only core`) replaces its own section and keeps the others, and
`parse()` reads the numbers back. The hand-written part (changes made, before/after,
recommendations) lives in bench/notes.md and is appended verbatim.

    python -c "from bench import report; print(report.parse(open('BENCHMARKS.md').read()).keys())"
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from bench import ROOT

NOTES = Path(__file__).resolve().parent / "notes.md"
ORDER = (
    "core",
    "pages",
    "preload",
    "cold",
    "runs",
    "cli",
    "frameworks",
    "clicks",
    "load",
    "soak",
    "burst",
    "room",
    "probe",
)  # the order sections appear in
_SECTION = re.compile(r"<!-- bench:section (\w+) -->\n(.*?)<!-- /bench:section \1 -->\n?", re.S)
_DATA = re.compile(r"<!-- bench:data (\w+) (.*?) -->", re.S)


@dataclass(frozen=True)
class Goal:
    """One target of the issue, e.g. a page rerun <= 100 ms; `met` is None when unmeasured."""

    name: str
    measured: str
    target: str
    met: bool | None


@dataclass
class Section:
    key: str  # one of ORDER
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)  # raw numbers, embedded as JSON
    load_start: tuple[float, ...] = ()
    load_end: tuple[float, ...] = ()
    started: str = ""
    seconds: float = 0.0


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float | None) -> str:
    """12.3 µs, 4.56 ms, 1.23 s: three significant figures in the unit that reads best."""
    if seconds is None or not math.isfinite(seconds):
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale or unit == "ns":
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return "—"


def spread(stats: dict, unit=duration) -> str:
    """ "median (min–max)" of a bench.stats() dict."""
    if not stats or stats.get("median") is None:
        return "—"
    if stats["n"] == 1:
        return unit(stats["median"])
    return f"{unit(stats['median'])} ({unit(stats['min'])}–{unit(stats['max'])})"


def megabytes(kb: float | None) -> str:
    return "—" if kb is None else f"{kb / 1024:.0f} MB"


def load_text(load: tuple[float, ...]) -> str:
    return " / ".join(f"{x:.2f}" for x in load) if load else "—"


def machine() -> dict:
    """What the numbers were measured on (no torch import: its version comes from metadata)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    memory = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": None if memory is None else round(memory / 2**30, 1),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "torch": version("torch"),
        "streamlit": version("streamlit"),
        "numpy": version("numpy"),
        "pandas": version("pandas"),
        "playwright": version("playwright"),
    }


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["(nothing measured)"]
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def render_section(section: Section) -> str:
    lines = [
        f"<!-- bench:section {section.key} -->",
        f"## {section.title}",
        "",
        f"Measured {section.started} in {section.seconds:.0f} s; load average (1/5/15 min) "
        f"{load_text(section.load_start)} at the start, {load_text(section.load_end)} at the end.",
        "",
        *_table(section.columns, section.rows),
        "",
    ]
    if section.goals:
        lines += ["**Goals**", ""]
        mark = {True: "met", False: "**missed**", None: "not measured"}
        lines += _table(
            ["goal", "measured", "target", "verdict"],
            [[g.name, g.measured, g.target, mark[g.met]] for g in section.goals],
        )
        lines.append("")
    lines += [f"- {note}" for note in section.notes]
    if section.notes:
        lines.append("")
    payload = json.dumps(section.data, sort_keys=True, separators=(",", ":"), default=str)
    lines.append(f"<!-- bench:data {section.key} {payload.replace('--', '- -')} -->")
    lines.append(f"<!-- /bench:section {section.key} -->")
    return "\n".join(lines) + "\n"


def parse(text: str) -> dict[str, dict]:
    """Section key -> {"markdown": its text, "data": its raw numbers} of a BENCHMARKS.md."""
    out = {}
    for key, body in _SECTION.findall(text):
        found = _DATA.search(body)
        data = (
            json.loads(found.group(2).replace("- -", "--"))
            if found and found.group(1) == key
            else {}
        )
        out[key] = {"markdown": body, "data": data}
    return out


def render(sections: list[Section], previous: str = "", command: str = "python -m bench") -> str:
    """The whole file: header, every section (new ones replace the previous file's), notes."""
    kept = {
        key: f"<!-- bench:section {key} -->\n{body}<!-- /bench:section {key} -->\n"
        for key, body in _SECTION.findall(previous)
    }
    for section in sections:
        kept[section.key] = render_section(section)
    m = machine()
    header = [
        "# Benchmarks",
        "",
        "Generated by `python -m bench` (see bench/__init__.py); do not edit the measured",
        "sections by hand. Each section records when it was measured and how loaded the",
        "shared machine was; the hand-written notes at the end come from bench/notes.md.",
        "",
        f"Last rendered {now()} by `{command}`; each section says when it was measured.",
        "",
        "| machine | |",
        "|---|---|",
        f"| CPU | {m['cpu']} × {m['cores']} cores, {m['memory_gb']} GB RAM |",
        f"| OS | {m['os']} |",
        f"| Python | {m['python']} |",
        f"| torch / streamlit | {m['torch']} / {m['streamlit']} |",
        f"| numpy / pandas / playwright | {m['numpy']} / {m['pandas']} / {m['playwright']} |",
        "",
    ]
    body = [kept[key] for key in ORDER if key in kept]
    notes = NOTES.read_text(encoding="utf-8") if NOTES.is_file() else ""
    return "\n".join(header) + "\n" + "\n".join(body) + ("\n" + notes if notes else "")


def write(sections: list[Section], out: Path, command: str) -> None:
    previous = out.read_text(encoding="utf-8") if out.is_file() else ""
    text = render(sections, previous, command)
    partial = out.with_suffix(out.suffix + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, out)


def relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
