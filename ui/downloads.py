"""Download buttons: every table as CSV and JSON, every real run as a JSON record.

A run record is what someone needs to trust (or re-run) a result elsewhere: the
parameters, the sha256 of the worker code that produced it, each rank's output hash,
and the torch and Python versions. Versions are read from package metadata, so a page
that never ran torch does not import it just to say which version it would have used.
"""

from __future__ import annotations

import json
import platform
from importlib import metadata

import pandas as pd
import streamlit as st

from ui.page import t


def _plain(frame: pd.DataFrame | object) -> pd.DataFrame:
    """The data behind a pandas Styler, or the frame itself."""
    return getattr(frame, "data", frame)


def table(frame: pd.DataFrame | object, name: str, **dataframe_kwargs: object) -> None:
    """`st.dataframe` plus CSV and JSON downloads of the same rows."""
    st.dataframe(frame, **dataframe_kwargs)
    data = _plain(frame)
    left, right, _ = st.columns([1, 1, 6])
    left.download_button(
        t("downloads.csv"),
        data.to_csv(index=False),
        f"{name}.csv",
        "text/csv",
        key=f"dl_{name}_csv",
        on_click="ignore",
    )
    right.download_button(
        t("downloads.json"),
        data.to_json(orient="records", force_ascii=False, indent=2),
        f"{name}.json",
        "application/json",
        key=f"dl_{name}_json",
        on_click="ignore",
    )


def run_record(result: object, params: dict, experiment: str) -> dict:
    """The JSON record of one real run (a `runners.launcher.RunResult`)."""
    return {
        "experiment": experiment,
        "parameters": params,
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


def run_download(result: object, params: dict, experiment: str) -> None:
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
