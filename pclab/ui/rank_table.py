"""The per-rank, per-parameter table pages 08 and 09 share: what each rank held, who counts
it, and what the step did with it - as text on the page, and as data in the downloads."""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd
import streamlit as st

from pclab.ui import downloads
from pclab.ui.figures import fmt, magnitude
from pclab.ui.language import t

# Cells kept on one line: "rank 0", and figures never split inside "+1e-05 → inf".
ONE_LINE = ("rank", "value", "coefficient", "applied", "param")


def rank_label(rank: int) -> str:
    return t("clipping.rank_label", rank=rank)


def _data_value(x: float) -> float | str:
    """A gradient as data: a number, or its name when injected non-finite (JSON has no inf)."""
    return x if math.isfinite(x) else str(x)


def rank_table(
    report,
    steps,
    value_text: Callable[[float], str],
    header: Callable[[str], str],
    *,
    with_steps: bool = False,
) -> None:
    """One row per (rank, parameter) of `report` (core.clipping.ClipReport) under the
    variant whose per-rank outcomes are `steps`. `value_text` writes a gradient on the page;
    `header(column)` is a column's heading. A skipped rank reads "skipped" on the page and
    downloads as an empty cell with skipped = true."""
    skipped = t("common.skipped")
    shown, data = [], []
    for s in steps:
        for j in report.scaled[s.rank]:
            scaled, unscaled = report.scaled[s.rank][j], report.unscaled[s.rank][j]
            owner = report.owners[j]
            mine = owner == s.rank
            counted = t("clipping.owner_self") if mine else t("clipping.owner_copy", rank=owner)
            both = {"rank": rank_label(s.rank), "id": j}
            shown.append(
                both
                | {
                    "value": f"{value_text(scaled)} → {value_text(unscaled)}",
                    "owner": counted,
                    "coefficient": skipped if s.skip else magnitude(s.coefficient),  # no sign
                    "applied": skipped if s.skip else fmt(s.applied[j]),
                    "param": f"{fmt(s.params[j])} · {skipped}" if s.skip else fmt(s.params[j]),
                }
                | ({"steps": str(s.step)} if with_steps else {})
            )
            data.append(
                both
                | {
                    "scaled": _data_value(scaled),
                    "unscaled": _data_value(unscaled),
                    "owner": counted,
                }
                | {"coefficient": None if s.skip else s.coefficient}
                | {
                    "applied": None if s.skip else s.applied[j],
                    "param": s.params[j],
                    "skipped": s.skip,
                }
                | ({"steps": s.step} if with_steps else {})
            )
    if not shown:
        return
    config = {c: st.column_config.TextColumn(header(c)) for c in shown[0]}
    labels = {c: header(c) for c in shown[0]} | {
        c: t(f"clipping.col_{c}") for c in ("scaled", "unscaled", "skipped")
    }
    frame = pd.DataFrame(data).rename(columns=labels)
    # A static table: its cells wrap, so all eight columns fit a projector's 800 px in both
    # languages (an interactive grid sizes its columns to their text and scrolled there: by
    # 110 px in English, and in Chinese by a few pixels on one machine's fonts and not another's).
    downloads.table(
        pd.DataFrame(shown),
        "ranks",
        data=frame,
        static=True,
        unbroken=ONE_LINE,
        whole_words=("owner",),
        column_config=config,
    )
