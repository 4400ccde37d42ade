"""How section 07 draws a coverage matrix and a DistributedSampler epoch (page-side only)."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd
import streamlit as st

from pclab.core import coverage, sampler
from pclab.ui import downloads, i18n
from pclab.ui.coverage_rows import coverage_rows
from pclab.ui.figures import fmt, magnitude
from pclab.ui.language import lang, t

text_column = st.column_config.TextColumn


def num(x, absolute: bool = False) -> str:
    """Tiny gaps in scientific notation; None / non-finite read 'undefined' via fmt();
    `absolute`: a |split − reference| gap, shown without a sign."""
    if x is None or not math.isfinite(x) or x == 0 or abs(x) >= 1e-3:
        return magnitude(x, 4) if absolute else fmt(x, 4)
    return f"{x:.1e}"


def names(kind: str, codes) -> str:
    return i18n.join(lang(), (t(f"validation.{kind}.{code}") for code in codes))


def count_input(column, label: str, low: int, high: int, default: int, key: str) -> int:
    """An integer input carried in the URL as ?key=value."""
    text = t(f"validation.{label}")
    return column.number_input(text, low, high, default, key=key, bind="query-params")


def matrix_table(matrix: coverage.CoverageMatrix, name: str, missing: str = "not_run") -> None:
    """One row per scenario, one column per comparison, each cell its status and gaps."""

    def cell(row: str, column: str) -> str:
        c = matrix.cells[(row, column)]
        status = missing if c.status == "not_run" else c.status
        return t(
            f"validation.status.{status}",
            diff=num(c.correct_diff, True),
            slip=num(c.slip_diff, True),
        )

    rows = [
        {"row": t(f"validation.row.{r}"), **{c: cell(r, c) for c in matrix.columns}}
        for r in matrix.rows
    ]
    labels = {"row": t("validation.matrix.row")}
    labels |= {c: t(f"validation.column.{c}") for c in matrix.columns}
    config = {c: text_column(label) for c, label in labels.items()}
    data = pd.DataFrame(coverage_rows(matrix, missing))  # one record per cell, numbers as numbers
    table = pd.DataFrame(rows)
    # static: its cells wrap, so the last column is not cut at a projector's width
    downloads.table(table, name, data=data, static=True, column_config=config)


def sampler_epoch_view(e: sampler.SamplerEpoch) -> None:
    """One DistributedSampler epoch: the token metrics, each rank's share, what was seen."""
    m = st.columns(4)
    help_text = t("validation.sampler.dataset_help")
    m[0].metric(t("validation.sampler.dataset_tokens"), e.dataset_tokens, help=help_text)
    consumed = t("validation.sampler.consumed_tokens")
    m[1].metric(consumed, e.consumed_tokens, delta=e.extra_tokens, delta_color="off")
    m[2].metric(t("validation.sampler.repeated"), e.repeated_entries)
    m[3].metric(t("validation.sampler.dropped"), e.dropped_samples)
    ranks = pd.DataFrame([{**r, "indices": list(r["indices"])} for r in e.rows])
    number = st.column_config.NumberColumn
    counted = ("rank", "samples", "repeats", "tokens")
    config = {c: number(t(f"validation.sampler.{c}")) for c in counted} | {
        "token_share": number(t("validation.sampler.token_share"), format="percent"),
        "indices": st.column_config.ListColumn(t("validation.sampler.indices")),
    }
    downloads.table(ranks, "sampler-ranks", hide_index=True, column_config=config, key="val_ranks")
    bars = (
        alt.Chart(ranks)
        .mark_bar()
        .encode(
            x=alt.X("rank:O", title=t("validation.sampler.rank")),
            y=alt.Y("tokens:Q", title=t("validation.sampler.tokens")),
            tooltip=[alt.Tooltip(f"{c}:Q", title=t(f"validation.sampler.{c}")) for c in counted],
        )
    )
    even = pd.DataFrame({"y": [e.even_share_tokens]})
    share = alt.Chart(even).mark_rule(strokeDash=[4, 4]).encode(y=alt.Y("y:Q"))
    st.altair_chart(bars + share, key="val_chart")
    seen = i18n.join(
        lang(),
        (t("validation.sampler.seen_item", times=k, samples=n) for k, n in e.times_seen.items()),
    )
    per_rank = e.rows[0]["samples"]
    st.markdown(
        t("validation.sampler.measured", per_rank=per_rank, seen=seen, extra=e.extra_tokens)
    )
