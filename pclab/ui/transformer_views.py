"""How the Full Transformer page draws the experiment's plan and a real run's report.

Page-side only (sections/experiment.py is the page): the branch tables, the |delta| chart,
the equal-count control and the N = 0 metrics, all from the report's language-neutral values.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from pclab.runners.results import RunResult
from pclab.ui import branch_table, i18n, vega
from pclab.ui.language import lang, t
from pclab.ui.plain_text import plain as md  # noqa: F401 - experiment.py's name for it

MEASURED = ("max_abs_diff", "passed", "first", "hashes")

DIFF_FLOOR = 1e-20  # where an exact 0 is drawn on a log axis (which has no 0)
# A mid grey reads on a light and on a dark page alike (>= 3:1 on both): legend symbols that
# carry no colour of their own would otherwise be drawn black, invisible in the dark theme.
NEUTRAL = "#8a8a8a"


def transformer_chart_rows(branches: list[dict], floor: float = DIFF_FLOOR) -> list[dict]:
    """One row per (branch, optimizer, parameter tensor) with |delta| after the update, for a
    log-scale chart: an exact 0 is plotted at `floor` and flagged `exact_zero`."""
    return [
        {
            "branch": row["name"],
            "optimizer": row["optimizer"],
            "tensor": tensor,
            "abs_diff": diff,
            "plotted": max(diff, floor),
            "exact_zero": diff == 0.0,
        }
        for row in branches
        for tensor, diff in row["param_diffs"].items()
    ]


def labelled(text: str) -> str:
    """The supervised suffix of a window, marked as the labels (CSS class pcl-label in
    ui.browser: a tint and a solid underline with >= 3:1 contrast in both themes)."""
    return f'<span class="pcl-label">{md(text)}</span>' if text else ""  # md: markup-proof


def _diff_chart_spec(report: dict) -> dict:
    """The |delta| per tensor chart (log scale) with the tolerance as a dashed rule."""
    chart = pd.DataFrame(transformer_chart_rows(report["branches"]))
    # One lookup per distinct value (a few), not one catalogue call per point (280).
    for column, prefix in (("branch", "experiment.branch"), ("optimizer", "experiment.optimizer")):
        names = {code: t(f"{prefix}.{code}") for code in chart[column].unique()}
        chart[column] = chart[column].map(names)
    points = (
        alt.Chart(chart)
        .mark_point(filled=True, opacity=0.8)
        .encode(
            x=alt.X("tensor:N", sort=None, title=t("experiment.chart.tensor")),
            y=alt.Y(
                "plotted:Q",
                scale=alt.Scale(type="log"),
                axis=alt.Axis(format=vega.LOG_TICKS),
                title=t("experiment.chart.diff"),
            ),
            color=alt.Color("branch:N", title=t("experiment.results.branch")),
            shape=alt.Shape(
                "optimizer:N",
                title=t("experiment.results.optimizer"),
                legend=alt.Legend(symbolFillColor=NEUTRAL, symbolStrokeColor=NEUTRAL),
            ),
            tooltip=[
                alt.Tooltip("branch:N", title=t("experiment.results.branch")),
                alt.Tooltip("optimizer:N", title=t("experiment.results.optimizer")),
                alt.Tooltip("tensor:N", title=t("experiment.chart.tensor")),
                alt.Tooltip("abs_diff:Q", format=".3e", title=t("experiment.chart.diff")),
            ],
        )
    )
    tolerance = pd.DataFrame({"y": [report["tolerance"]]})
    rule = alt.Chart(tolerance).mark_rule(strokeDash=[4, 4]).encode(y=alt.Y("y:Q"))
    return vega.spec_of(points + rule)


def _zero_labels(report: dict) -> None:
    zero, adamw = report["zero_labels"], report["zero_labels"]["by_optimizer"]["adamw"]
    st.subheader(t("experiment.zero.heading"))
    steps = {"before": int(adamw["steps_before"][0]), "after": int(adamw["steps_after_naive"][0])}
    st.markdown(t("experiment.zero.body", **steps))
    z1, z2 = st.columns(2)
    skipped = t("common.yes") if zero["skip_state_identical"] else t("common.no")
    z1.metric(t("experiment.zero.skip"), skipped)
    z2.metric(t("experiment.zero.max_change"), f"{adamw['naive_max_weight_change']:.2e}")
    # A list, not a metric: plain text wraps, where a metric's value would be cut.
    changed = i18n.join(lang(), (t(f"experiment.zero.kind.{k}") for k in adamw["naive_changed"]))
    head = f"**{t('experiment.zero.changed')}**"
    st.markdown(i18n.join(lang(), [head, changed or t("experiment.zero.none")], "head"))


def run_results(result: RunResult) -> None:
    """Everything a finished run shows: branches, chart, the equal-count control, N = 0.

    The tables and the chart are computed before anything is drawn, then drawn in one burst:
    the browser redraws the page once per batch of elements it receives, and elements
    computed between draws arrived in several batches (0.1 s of a click, BENCHMARKS.md)."""
    report = result.report
    control = report["equal_count_control"]
    branches = branch_table.prepare(report["branches"], "exp_results", MEASURED)
    chart = _diff_chart_spec(report)
    control_branches = branch_table.prepare(control["branches"], "exp_control", MEASURED)
    st.subheader(t("experiment.results.heading"))
    tol, seconds = f"{report['tolerance']:.0e}", f"{result.seconds:.0f}"
    n = report["num_valid_labels"]
    st.caption(t("experiment.results.caption", n=n, seconds=seconds, tol=tol))
    branches.draw()
    st.subheader(t("experiment.chart.heading"))
    st.vega_lite_chart(spec=chart, key="exp_chart")
    st.caption(t("experiment.chart.caption", floor=f"{DIFF_FLOOR:.0e}"))
    st.subheader(t("experiment.control.heading"))
    st.markdown(t("experiment.control.body", labels=i18n.join(lang(), control["labels"])))
    control_branches.draw()
    _zero_labels(report)
