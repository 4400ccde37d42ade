"""08 Global gradient norm: one ownership-aware clip coefficient, beside the wrong norms."""

from typing import Final

import altair as alt
import pandas as pd
import streamlit as st

from pclab.core import clipping
from pclab.ui.clipping_run_view import clipping_results
from pclab.ui.exercise import predict_number
from pclab.ui.figures import fmt, magnitude
from pclab.ui.input_errors import guard
from pclab.ui.language import coded_choice, t
from pclab.ui.page_header import header
from pclab.ui.rank_table import rank_label, rank_table
from pclab.ui.run_panel import run_section
from pclab.ui.show_code import show_code

LR = 0.1
RUN_PARAMS = {"inject_overflow": 1, "nonfinite": "inf"}  # the same launch as page 09's default
URL: Final = "query-params"  # numbers and toggles travel in the link as they are


header("clipping")
st.markdown(t("clipping.formula"))
c1, c2, c3 = st.columns(3)
layout = coded_choice(
    c1.selectbox,
    "clipping.scenario",
    tuple(clipping.SCENARIOS),
    key="clip_layout",
    default="seed",
    labels="clipping.scenarios.",
)
scale = c2.number_input(t("clipping.scale"), value=8.0, key="clip_scale", bind=URL)
tau = c3.number_input(t("clipping.threshold"), value=1.0, key="clip_threshold", bind=URL)
add_rep = c1.toggle(t("clipping.add_replicated"), key="clip_add_rep", bind=URL)
rep_value = c1.number_input(
    t("clipping.replicated_value"), value=12.0, key="clip_rep_value", bind=URL
)
add_shard = c2.toggle(t("clipping.add_sharded"), key="clip_add_shard", bind=URL)
shard_value = c2.number_input(
    t("clipping.sharded_value"), value=-2.0, key="clip_shard_value", bind=URL
)
# "rank 0" reads the same in every language, so the bound label is a safe URL value.
shard_rank = c3.selectbox(
    t("clipping.sharded_rank"), (0, 1), format_func=rank_label, key="clip_rank", bind=URL
)
variant = coded_choice(
    st.segmented_control,
    "clipping.variant",
    clipping.VARIANTS[:4],
    key="clip_variant",
    default="global",
    labels="clipping.variants.",
)
st.caption(t("clipping.setup", scale=magnitude(scale), lr=magnitude(LR)))

with guard({"scale": t("clipping.scale"), "max_norm": t("clipping.threshold")}):
    grads = clipping.scenario_grads(
        layout,
        scale,
        extra_sharded=((shard_rank, "w2", shard_value),) if add_shard else (),
        extra_replicated=(("shared2", rep_value),) if add_rep else (),
    )
    report = clipping.clip_report(grads, tau, scale, LR)
    steps = report.outcomes[variant]
    scenario = (layout, scale, tau, add_rep, rep_value, add_shard, shard_value, shard_rank, variant)
    question, why = t("clipping.exercise"), t("clipping.exercise_why")
    if not predict_number(
        "clip_ex", question, report.coefficient, why, scenario=scenario, show=magnitude
    ):
        st.stop()

    def shown(x: float | None) -> str:  # a norm or c: no sign; a skipped step reads "skipped"
        return t("common.skipped") if report.skip else magnitude(x)

    m1, m2, m3 = st.columns(3)
    m1.metric(t("clipping.metric_norm"), shown(report.global_norm))
    m2.metric(t("clipping.metric_clipped"), shown(report.applied_norms[variant]))
    coefficients = " / ".join(
        dict.fromkeys(shown(s.coefficient) for s in steps)
    )  # one, or one per rank
    m3.metric(t("clipping.metric_coefficient"), coefficients)
    # Only scale * g overflowing skips here (this page injects nothing); clipped is None then.
    if report.skip or report.clipped is None:
        st.warning(t("clipping.skip_note"), icon=":material/block:")
    else:
        figures = {
            "norm": magnitude(report.global_norm),  # norms and c have no sign; gradients do
            "coefficient": magnitude(report.coefficient),
            "clipped": "[" + ", ".join(fmt(g, 4) for g in report.clipped.values()) + "]",
            "double": magnitude(report.double_counted_norm),
            "local": " / ".join(map(magnitude, report.per_rank_norms)),
            "scaled": magnitude(report.scaled_norm),
        }
        st.markdown(t("clipping.seed_check", **figures))
    marks = clipping.protocol_marks(report, variant)
    (st.error if "wrong" in marks.values() else st.info)(t(f"clipping.why.{variant}"))
    if report.diverged[variant]:
        st.error(t("clipping.diverged_note"), icon=":material/call_split:")
    st.subheader(t("clipping.table_title"))
    rank_table(report, steps, fmt, lambda c: t(f"clipping.col_{c}"))

    st.subheader(t("clipping.chart_title"), help=t("clipping.chart_help"))
    top = min(2 * max(tau, report.global_norm or 0, 0.5), 1e308)  # the chart's last threshold
    sweep = pd.DataFrame(clipping.threshold_sweep(report, top))
    names = {k: t(f"clipping.series.{k}") for k in ("global", "double_counted", "before_unscale")}
    names |= {f"per_rank_{r}": t("clipping.series.per_rank", rank=r) for r in (0, 1)}
    if not sweep.empty:
        sweep = sweep.assign(series=sweep["norm"].map(names), correct=sweep["norm"] == "global")
        x = alt.X("threshold:Q", title=t("clipping.axis_threshold"))
        y = alt.Y("coefficient:Q", title=t("clipping.axis_coefficient"))
        lines = alt.Chart(sweep).encode(x=x, y=y, color=alt.Color("series:N", title=None))
        # The correct norm solid, thick and drawn last: where a wrong norm coincides with it
        # (no replicated parameter to double-count), it stays visible on top.
        wrong = lines.transform_filter(~alt.datum.correct).mark_line(strokeDash=[6, 4])
        right = lines.transform_filter(alt.datum.correct).mark_line(strokeWidth=3.5)
        now = pd.DataFrame({"threshold": [tau]})
        rule = alt.Chart(now).mark_rule(strokeDash=[4, 4]).encode(x=alt.X("threshold:Q"))
        st.altair_chart(wrong + right + rule)

st.subheader(t("clipping.run_title"))
st.caption(t("clipping.run_caption"))
run_section(
    "clipping",
    RUN_PARAMS,
    show=clipping_results,
    key="clip_run",
    button=t("clipping.run_button"),
    label=t("clipping.run_label"),
)

show_code(clipping.clip_report, clipping.norm_parts, clipping.clip_coefficient)
