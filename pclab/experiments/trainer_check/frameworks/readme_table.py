"""The README's framework table, rendered from the record and the table: never typed. Each row
is one setting: its framework, the recorded version, the page's English words for the setting
and for what to set (locales/en/frameworks.toml), the check's verdict, the scheme measured,
the counts, and the weight x N grid (a coupled row: each parameter group's factor). The
table sits in README.md between two markers; `write` puts it there, with the examples' index
in examples/README.md, and a test fails while either differs.

    python -m pclab.experiments.trainer_check.frameworks --readme   # rewrite both, run nothing
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

import pclab.experiments.trainer_check.examples as examples
from pclab.experiments.trainer_check.frameworks import run_words
from pclab.experiments.trainer_check.frameworks.loader import by_code, version_label
from pclab.experiments.trainer_check.frameworks.run_table import ROWS, load_runs
from pclab.experiments.trainer_check.frameworks.setting import (
    ACCUM,
    FOLDERS,
    SHARED,
    SHARED_FOLDER,
)
from pclab.experiments.trainer_check.frameworks.table import SETTINGS
from pclab.paths import EXAMPLES_ROOT, IMPORT_ROOT, PACKAGE_DIR

README = IMPORT_ROOT / "README.md"
BLOCK = "framework-table"  # README.md's markers: <!-- framework-table:start/end -->
RUNS_BLOCK = "framework-runs"  # the table across a run (frameworks.run_table's record)
RUNS_HEADER = (
    "framework",
    "version",
    "tail window",
    "schedule",
    "a window with N = 0",
    "killed and restarted",
    "what to set",
)
HEADER = (
    "framework",
    "version",
    "setting",
    "verdict",
    "scheme measured",
    "terms (coupled: items), uneven",
    "weight × N, uneven (coupled: factor)",
    "what to set",
)
Record: TypeAlias = dict[str, Any]  # one setting's record
Words: TypeAlias = dict[str, Any]  # a catalogue's table of words
SET = "**Set:** "  # the page's advice opens with it; the column's heading says it already


def english(area: str) -> dict[str, Any]:
    """One English catalogue file of the pages (pclab/locales/en/<area>.toml), as data."""
    with (PACKAGE_DIR / "locales" / "en" / f"{area}.toml").open("rb") as f:
        return tomllib.load(f)


def small(x: float) -> str:
    """A difference, residual or tolerance: 2.8e-17, 6.0e-8, 0.47."""
    return f"{x:.2g}" if x >= 1e-3 else f"{x:.1e}".replace("e-0", "e-")


def weight(x: float) -> str:
    """A weight or factor to three significant digits, an exact whole number as itself: 1,
    0.690, 1.00 (a measured 0.9999997)."""
    return str(round(x)) if abs(x - round(x)) < 1e-12 else f"{x:#.3g}"


def _grid(rows: list[list[Any]] | None, cell: Callable[[Any], str] = weight) -> str:
    """[[a, b], [c, d]] as "a, b / c, d" (a rank's microsteps, then the next rank's)."""
    if rows is None:
        return "—"
    return " / ".join(", ".join("—" if x is None else cell(x) for x in row) for row in rows)


def _scheme(record: dict[str, Any]) -> str:
    if record["scheme"] is None:  # its reason's head: "torchtitan 0.3.0 cannot run on a CPU"
        return (record["reason"] or "nothing measured").split(": ", 1)[0]
    text = f"`{record['scheme']}`"
    if record.get("mode") == "coupled":
        text += f" (residual {small(record['residual'])})"
    if record["status"] == "same_update":
        text += f", the same update to {small(record['max_abs_diff'])}"
    if record["dtype"] != "float64":
        text += f" ({record['dtype']}, tolerance {small(record['tolerance'])})"
    return text


def _factor(record: dict[str, Any]) -> str:
    """A coupled row's factors: one per parameter group, or the named objective's on every
    parameter, or none (`other`: the best single factor)."""
    if record["scheme"] == "other":
        return f"none fits (best single factor {weight(record['factor'])})"
    groups = record["scale_groups"]
    if not groups:
        return f"{weight(record['factor'])} on every parameter"
    return "; ".join(
        ", ".join(f"`{p}`" for p in g["parameters"]) + f" {weight(g['factor'])}" for g in groups
    )


def _cell(text: str) -> str:
    """Text a Markdown table cell can hold: no pipe, no line break."""
    return " ".join(text.replace("|", "\\|").split())


def row(code: str, record: Record, words: Words, verdicts: Words) -> list[str]:
    """One setting's cells, from its record and the page's English words."""
    coupled = record.get("mode") == "coupled"
    setting = words["setting"][code] + (" (default)" if record["default"] else "")
    version = version_label(record)
    status = record["status"]
    return [
        record["framework"],
        version,
        setting,
        "not run" if status is None else verdicts[status],
        _scheme(record),
        _grid(record["sizes"] if coupled else record["counts"], str),
        _factor(record) if coupled else _grid(record["weights"]),
        words["advice"][code].format(version=record["version"]).removeprefix(SET),
    ]


def table() -> str:
    """The framework table as Markdown, one row per setting in the table's order."""
    records, words, verdicts = by_code(), english("frameworks"), english("check")["verdict"]
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for s in SETTINGS:
        cells = row(s.code, records[s.code], words, verdicts)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def say_english(key: str, **values: Any) -> str:
    """A page catalogue's English words by their key ("frameworks.runs.tail_own"), filled."""
    area, *path = key.split(".")
    found: Any = english(area)
    for part in path:
        found = found[part]
    return str(found).format(**values)


def runs_table() -> str:
    """The table across a run as Markdown: one row per framework's run record."""
    lines = ["| " + " | ".join(RUNS_HEADER) + " |", "|" + "---|" * len(RUNS_HEADER)]
    for record in load_runs()["records"]:
        words = run_words.cells(record, say_english)
        cells = [record["framework"], f"{record['package']} {record['version']}"]
        cells += [words[column] for column in run_words.COLUMNS]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _file(path: Path) -> str:
    """A file of examples/ as a link relative to examples/README.md."""
    relative = path.relative_to(EXAMPLES_ROOT).as_posix()
    return f"[`{relative}`]({relative})"


def _module(path: Path, shows: str) -> str:
    return f"| {_file(path)} | {_cell(shows)} | — | — (a module) |"


def _trainers(entries: list[examples.Example], verdicts: Words) -> list[str]:
    lines = []
    for e in entries:
        at = "" if e.accum == ACCUM else f" (K = {e.accum})"
        verdict = verdicts[e.verdict] + at
        scheme = "—" if e.scheme == "—" else ", ".join(f"`{x}`" for x in e.scheme.split(", "))
        lines.append(f"| {_file(e.file)} | {_cell(e.shows)} | {scheme} | {verdict} |")
    return lines


def _folder(folder: str, records: dict[str, Record], words: Words, verdicts: Words) -> list[str]:
    """One framework folder's files: its shared modules, its adapters (each with the page's
    words for its setting and its row's recorded verdict), then any other example the page
    runs from there."""
    lines = [_module(m.path, m.shows) for m in SHARED if m.folder == folder]
    adapters = [s for s in SETTINGS if s.adapter and FOLDERS[s.package] == folder]
    for s in adapters:
        r = records[s.code]
        at = "" if s.accum == ACCUM else f" (K = {s.accum})"
        verdict = "not run" if r["status"] is None else verdicts[r["status"]] + at
        shows = _cell(f"{s.framework}: {words['setting'][s.code]}")
        lines.append(f"| {_file(s.path)} | {shows} | `{r['scheme']}` | {verdict} |")
    lines += _run_rows(folder, verdicts)
    codes = {s.code for s in adapters}
    others = [
        e
        for e in (*examples.TOKEN, *examples.RUN)
        if e.path.startswith("frameworks/") and e.file.parent.name == folder and e.code not in codes
    ]
    return lines + _trainers(others, verdicts)


def _run_rows(folder: str, verdicts: Words) -> list[str]:
    """The run adapters of `folder` the page does not offer (examples.run_rows_not_offered),
    each with the diagnoses and the verdict its row's record holds: a run adapter its run's,
    a resume adapter its restarts' (and the run's verdict, which its check also gives)."""
    records = {r["code"]: r for r in load_runs()["records"]}
    resumes = {row.resume: row.code for row in ROWS if row.resume}
    lines = []
    for code, path, framework in examples.run_rows_not_offered():
        if path.parent.name != folder:
            continue
        record = records.get(resumes.get(code, code))
        found, told, does = _resume_told(record) if code in resumes else _run_told(record)
        status = next((s for s in ("different", "no_evidence", "same_update") if s in told), None)
        scheme = ", ".join(f"`{c}`" for c in sorted(found)) or "—"
        verdict = verdicts[status] if status else "not run"
        row = next(r for r in ROWS if code in r.adapters())
        where = " (an environment of its own)" if row.own_environment else ""
        shows = _cell(f"{framework}: {does}{where}")
        lines.append(f"| {_file(path)} | {shows} | {scheme} | {verdict} |")
    return lines


def _run_told(record: Record | None) -> tuple[set[str], set[str], str]:
    """A run adapter's codes and verdict, from its row's run record (a coupled loop's wrong
    pool too: it has no code of its own)."""
    run = record["run"] if record else None
    found = {c for s in run["scenarios"].values() for c in s["codes"]} if run else set()
    if run and run.get("pool") not in (None, "global_batch"):
        found.add(run["pool"])
    return found, {run["status"]} if run else set(), "its own loop across a run"


def _resume_told(record: Record | None) -> tuple[set[str], set[str], str]:
    """A resume adapter's codes and verdicts: its restarts', and the run's (its check gives
    that too)."""
    points = (record or {}).get("resume") or []
    found = {c for point in points for c in point["codes"]}
    told = (
        {record["run"]["status"], *(p["verdict"] for p in points)} if record and points else set()
    )
    return found, told, "its own loop, killed and restarted from its own checkpoints"


def index() -> str:
    """examples/README.md's list of every file: the contract by example, then each framework
    folder (frameworks/shared/ first)."""
    records, words, verdicts = by_code(), english("frameworks"), english("check")["verdict"]
    head = ["| file | what it shows | scheme (a run: its diagnoses) | verdict (P = 2, K = 2) |"]
    head.append("|---|---|---|---|")
    lines = ["### `trainers/`: the contract by example", "", *head]
    every = (*examples.TOKEN, *examples.COUPLED, *examples.RUN)
    listed = [e for e in every if e.path.startswith("trainers/")]
    lines += _trainers(listed, verdicts) + [_module(m.file, m.shows) for m in examples.MODULES]
    for folder in (SHARED_FOLDER, *FOLDERS.values()):
        lines += ["", f"### `frameworks/{folder}/`", "", *head]
        lines += _folder(folder, records, words, verdicts)
    return "\n".join(lines) + "\n"


def replaced(text: str, block: str, body: str) -> str:
    """`text` with what stands between <!-- block:start --> and <!-- block:end --> replaced by
    `body` (ValueError when the markers are missing)."""
    start, end = f"<!-- {block}:start -->\n", f"<!-- {block}:end -->"
    head, found, rest = text.partition(start)
    if not found or end not in rest:
        raise ValueError(f"no {start.strip()} ... {end} markers")
    return head + start + body + end + rest.split(end, 1)[1]


def _updates() -> list[tuple[Path, str, str]]:
    """Every file with a generated block: (file, its text, its text with the block made)."""
    made = {README: [(BLOCK, table()), (RUNS_BLOCK, runs_table())]}
    made[examples.INDEX] = [(examples.BLOCK, index())]
    updates = []
    for path, blocks in made.items():
        text = new = path.read_text(encoding="utf-8")
        for block, body in blocks:
            new = replaced(new, block, body)
        updates.append((path, text, new))
    return updates


def stale() -> list[Path]:
    """The files whose generated block differs from what the record and the tables make."""
    return [path for path, text, new in _updates() if new != text]


def write() -> list[Path]:
    """Rewrite every stale generated block; returns the files rewritten."""
    rewritten = []
    for path, text, new in _updates():
        if new != text:
            path.write_text(new, encoding="utf-8")
            rewritten.append(path)
    return rewritten
