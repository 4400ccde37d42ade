"""Download buttons: every table as CSV and JSON, every real run as a JSON record.

A table downloads as data: the headers the page shows, numbers as numbers (not the text
the page formats them into), and CSV in UTF-8 with a byte-order mark for Excel.

A run record is what someone needs to trust (or re-run) a result elsewhere: the
parameters, the sha256 of the worker code that produced it, each rank's output hash,
and the torch and Python versions. Versions are read from package metadata, so a page
that never ran torch does not import it just to say which version it would have used.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, cast

import pandas as pd
import streamlit as st
from streamlit.elements.lib.column_config_utils import ColumnConfigMappingInput

from pclab import paths
from pclab.runners.results import RunResult
from pclab.ui.language import t


def _server_folders() -> list[tuple[str, str]]:
    """(absolute folder, what a download says instead), longest first: the lab's own folder
    becomes nothing (paths relative to the lab's root), the others a neutral name."""
    folders = {
        str(paths.IMPORT_ROOT): "",
        sys.prefix: "<python>",
        sys.base_prefix: "<python>",
        tempfile.gettempdir(): "<tmp>",
        str(Path.home()): "~",
    }
    return sorted(
        ((f"{k}{os.sep}", v and f"{v}{os.sep}") for k, v in folders.items() if k != os.sep),
        key=lambda kv: -len(kv[0]),
    )


def relative(value: object) -> object:
    """`value` (a record, a list, a text) with no absolute folder of the server in it: a path
    as `paths.shown` gives it (relative to the lab's root), a folder inside a text replaced."""
    if isinstance(value, dict):
        return {k: relative(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [relative(v) for v in value]
    if not isinstance(value, str):
        return value
    if os.path.isabs(value) and "\n" not in value and Path(value).exists():
        return paths.shown(value)
    for folder, instead in _server_folders():
        value = value.replace(folder, instead)
    return value


def _plain(frame: pd.DataFrame | object) -> pd.DataFrame:
    """The data behind a pandas Styler, or the frame itself."""
    return getattr(frame, "data", frame)


def _label(key: object, config: object) -> str:
    """A column's header as the page shows it: a label string, or a column config's label."""
    if isinstance(config, str):
        return config
    if isinstance(config, dict) and config.get("label"):
        return config["label"]
    return str(key)


def export_frame(
    frame: pd.DataFrame | object, column_config: ColumnConfigMappingInput | None = None
) -> pd.DataFrame:
    """The rows to download: the page's column headers (so a Chinese page's CSV is headed in
    Chinese, not with internal names), and the values as the frame holds them."""
    data = _plain(frame)
    labels = {c: _label(c, v) for c, v in (column_config or {}).items() if c in data.columns}
    texts = [c for c in data.columns if data[c].dtype == object]
    if texts:  # a path or a message in a cell: no server folder in a download
        data = data.copy()
        for column in texts:
            data[column] = data[column].map(relative)
    return data.rename(columns=labels)


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """UTF-8 with a byte-order mark: Excel then reads 中文 headers and values correctly."""
    return frame.to_csv(index=False).encode("utf-8-sig")


def json_text(frame: pd.DataFrame) -> str:
    return frame.to_json(orient="records", force_ascii=False, indent=2)


@dataclass(frozen=True)
class PreparedTable:
    """A table and its two downloads, computed and ready to draw (`draw`): a page that draws
    several elements computes them all first, then draws them in one burst. Streamlit's
    browser side redraws the page once per batch of elements it receives (about every
    10 ms), so elements computed in between arrive in many batches (BENCHMARKS.md, issue 35)."""

    frame: pd.DataFrame | object
    name: str
    csv: bytes
    json: str
    static: bool = False
    hide_index: bool | None = None
    column_config: ColumnConfigMappingInput | None = None
    key: str | None = None

    def draw(self) -> None:
        if self.static:
            st.table(self.frame, hide_index=True)
        else:
            st.dataframe(
                self.frame,
                hide_index=self.hide_index,
                column_config=self.column_config,
                key=self.key,
            )
        # Side by side at their own width, wrapping on a narrow screen (never cut to "C…").
        row = st.container(horizontal=True, gap="small")
        for label, payload, suffix, mime in (
            (t("downloads.csv"), self.csv, "csv", "text/csv"),
            (t("downloads.json"), self.json, "json", "application/json"),
        ):
            row.download_button(
                label,
                payload,
                f"{self.name}.{suffix}",
                mime,
                key=f"dl_{self.name}_{suffix}",
                on_click="ignore",
            )


def prepare_table(
    frame: pd.DataFrame | object,
    name: str,
    *,
    data: pd.DataFrame | None = None,
    static: bool = False,
    unbroken: Sequence[str] = (),
    one_line_headers: Sequence[str] = (),
    whole_words: Sequence[str] = (),
    hide_index: bool | None = None,
    column_config: ColumnConfigMappingInput | None = None,
    key: str | None = None,
) -> PreparedTable:
    """`st.dataframe` plus CSV and JSON downloads of the same rows, computed: `.draw()` draws
    them (`table` does both at once).

    `data`: the rows as data when `frame` holds display text (a figure formatted as
    "+24 → +3", a shortened hash, "skipped"): the download then has one number per cell,
    full hashes and empty cells for undefined values. Its columns take the same headers.
    `static`: an st.table instead, whose cells wrap (nothing cut, at any width); the cells of
    its `unbroken` columns stay on one line instead (a figure such as "1.4e-15" is never
    split at its hyphen), and so do the headers of its `one_line_headers` columns (a short
    header over narrow cells, 默认 over 是 / 否, would otherwise stand one character a
    line). The cells and headers of its `whole_words` columns break between words only, never
    inside a Chinese word (CSS word-break: keep-all): 不同的更新 and 在容差内 stay on one line
    instead of standing one character a line in a narrow column, while a longer text still
    wraps at its spaces and punctuation (English wraps as before). That is styling only: the
    text is the figure's own, so a number copied from the table pastes as a number (no
    invisible joiner or special hyphen in it).
    `hide_index`, `column_config`, `key`: st.dataframe's (`column_config` heads the downloads).
    """
    export = export_frame(frame if data is None else data, column_config)
    if static:  # an st.table shows the headers the downloads carry
        frame = export_frame(frame, column_config)
        kept, headers, words = (
            [_label(c, (column_config or {}).get(c)) for c in columns]
            for columns in (unbroken, one_line_headers, whole_words)
        )
        if kept or headers or words:
            frame = _nowrap(frame, kept, headers, words)
    return PreparedTable(
        frame,
        name,
        csv_bytes(export),
        json_text(export),
        static,
        hide_index,
        column_config,
        key,
    )


def _nowrap(frame: pd.DataFrame, cells: list[str], headers: list[str], words: Sequence[str] = ()):
    """A Styler keeping the `cells` columns' cells and the `headers` columns' headers on one
    line (st.table gives a header the classes `col_heading colN`, as pandas does, and a cell
    `data colN`), and the `words` columns' cells and headers from breaking inside a word.

    st.table writes each cell's text in a Markdown container that sets white-space and
    word-break of its own, so a rule on the cell alone is not inherited by the text (the
    browser showed 在容差内 one character a line under a nowrap header): each rule is also
    written for the cell's descendants."""
    styler = frame.style
    if cells:
        styler = styler.set_properties(subset=cells, **{"white-space": "nowrap"})
    if words:
        styler = styler.set_properties(subset=list(words), **{"word-break": "keep-all"})
    rules = []
    for kind, names, props in (
        ("data", cells, "white-space: nowrap"),
        ("data", words, "word-break: keep-all"),
        ("col_heading", words, "word-break: keep-all"),
        ("col_heading", headers, "white-space: nowrap"),
    ):
        for i in (frame.columns.get_loc(name) for name in names):
            rules += [
                {"selector": f".{kind}.col{i}{inner}", "props": props} for inner in ("", " *")
            ]
    return styler.set_table_styles(rules, overwrite=False) if rules else styler


def table(frame: pd.DataFrame | object, name: str, **options: Any) -> None:
    """`prepare_table(frame, name, **options)`, drawn at once."""
    prepare_table(frame, name, **options).draw()


def run_record(result: RunResult, params: dict[str, object], experiment: str) -> dict[str, Any]:
    """The JSON record of one real run (a `runners.launcher.RunResult`): paths relative to the
    lab's root, never the server's absolute folders. "parameters": what the ranks ran (every
    declared field, checked: the report's), else the page's `params`."""
    report = result.report if isinstance(result.report, dict) else {}
    record = {
        "experiment": experiment,
        "parameters": report.get("parameters", params),
        "ok": result.ok,
        "message": result.message,
        "seconds": round(result.seconds, 3),
        "worker_sha256": result.worker_hash,
        "rank_sha256": [rank.get("sha256") for rank in result.ranks],
        "versions": {
            "torch": metadata.version("torch"),
            "python": platform.python_version(),
            "streamlit": metadata.version("streamlit"),
        },
        "report": result.report,
    }
    return cast(dict[str, Any], relative(record))  # a dict stays a dict


def run_download(result: RunResult, params: dict[str, object], experiment: str) -> None:
    """A JSON download of `run_record(...)` next to a run's results."""
    record = run_record(result, params, experiment)
    st.download_button(
        t("downloads.run_record"),
        json.dumps(record, ensure_ascii=False, indent=2, default=str),
        f"{experiment}-run.json",
        "application/json",
        key=f"dl_{experiment}_run",
        icon=":material/download:",
        on_click="ignore",
    )
