"""05 Global negatives: InfoNCE over gathered documents, full vs locally kept gradient."""

from typing import Final, Literal

import altair as alt
import pandas as pd
import streamlit as st

from pclab.core import infonce
from pclab.ui import downloads
from pclab.ui.exercise import predict_number
from pclab.ui.figures import fmt, magnitude
from pclab.ui.input_errors import guard
from pclab.ui.language import t
from pclab.ui.page_header import header
from pclab.ui.show_code import show_code
from pclab.ui.trainer_coupled import link_to_coupled_check

header("negatives")
st.markdown(t("negatives.setup"))
st.latex(t("negatives.formula"))

SEED = infonce.SEED
cols = st.columns(5)


def coordinate(column, name: Literal["q", "d"], i: int) -> float:
    """One query or document coordinate, carried in the URL as neg_<name><i>."""
    label, default = t(f"negatives.controls.{name}", i=i), SEED[name][i]
    return column.number_input(label, -10.0, 10.0, default, 0.5, key=f"neg_{name}{i}", bind=URL)


URL: Final = "query-params"
q = [coordinate(cols[i], "q", i) for i in range(2)]
d = [coordinate(cols[2 + j], "d", j) for j in range(2)]
tau = cols[4].slider(
    t("negatives.controls.tau"), 0.05, 5.0, SEED["tau"], 0.05, key="neg_tau", bind="query-params"
)

with guard():
    result = infonce.contrastive(q, d, tau)
    sweep = infonce.tau_sweep(q, d)
    n = len(result.probs)
    full, kept = result.grad_d_full[0], result.grad_d_local[0]
    if isinstance(full, tuple) or isinstance(kept, tuple):  # scalar q, d: scalar gradients
        raise TypeError("page 05 takes one number per representation, not vectors")
    question, why = t("negatives.exercise"), t("negatives.exercise_why")
    if not predict_number("neg_ex", question, kept, why, scenario=(q, d, tau)):
        st.stop()

    m = st.columns(4)
    m[0].metric(t("negatives.metric.loss"), fmt(result.loss), help=t("negatives.metric.loss_help"))
    m[1].metric(t("negatives.metric.grad_full"), fmt(full))
    m[2].metric(t("negatives.metric.grad_kept"), fmt(kept))
    m[3].metric(
        t("negatives.metric.max_diff"),
        magnitude(result.max_grad_diff),  # a max |Δ|: no sign
        help=t("negatives.metric.max_diff_help"),
    )

    number = st.column_config.NumberColumn
    st.subheader(t("negatives.probs.heading"))
    st.caption(t("negatives.probs.caption"))
    probs = pd.DataFrame(
        [
            {
                "query": t("negatives.probs.row", i=i),
                **{f"logit_{j}": result.logits[i][j] for j in range(n)},
                **{f"p_{j}": result.probs[i][j] for j in range(n)},
            }
            for i in range(n)
        ]
    )
    downloads.table(
        probs,
        "probabilities",
        hide_index=True,
        column_config={
            "query": st.column_config.TextColumn(t("negatives.probs.query")),
            **{
                f"logit_{j}": number(t("negatives.probs.logit", j=j), format="%+.6f")
                for j in range(n)
            },
            **{f"p_{j}": number(t("negatives.probs.prob", j=j), format="%.6f") for j in range(n)},
        },
        key="neg_probs",
    )

    st.subheader(t("negatives.contrib.heading"))
    st.caption(t("negatives.contrib.caption"))
    contributions = pd.DataFrame(
        [
            {
                "document": t("negatives.contrib.row", j=j),
                **{f"from_{i}": result.contributions[i][j] for i in range(n)},
                "kept": result.grad_d_local[j],
                "full": result.grad_d_full[j],
            }
            for j in range(n)
        ]
    )
    downloads.table(
        contributions,
        "contributions",
        hide_index=True,
        column_config={
            "document": st.column_config.TextColumn(t("negatives.contrib.document")),
            **{
                f"from_{i}": number(t("negatives.contrib.from_query", i=i), format="%+.6f")
                for i in range(n)
            },
            "kept": number(t("negatives.contrib.kept"), format="%+.6f"),
            "full": number(t("negatives.contrib.full"), format="%+.6f"),
        },
        key="neg_contrib",
    )
    st.markdown(t("negatives.why"))

    st.subheader(t("negatives.chart.heading"))
    st.caption(t("negatives.chart.caption"))
    series = {"grad_full": t("negatives.chart.full"), "grad_local": t("negatives.chart.kept")}
    long = pd.DataFrame(sweep).melt(
        id_vars="tau", value_vars=list(series), var_name="series", value_name="gradient"
    )
    long["series"] = long["series"].map(series)
    lines = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("tau:Q", scale=alt.Scale(type="log"), title=t("negatives.chart.tau")),
            y=alt.Y("gradient:Q", title=t("negatives.chart.gradient")),
            color=alt.Color("series:N", title=t("negatives.chart.series")),
            tooltip=[
                alt.Tooltip("tau:Q", title=t("negatives.controls.tau")),
                alt.Tooltip("series:N", title=t("negatives.chart.series")),
                alt.Tooltip("gradient:Q", title=t("negatives.chart.gradient"), format="+.6f"),
            ],
        )
    )
    rule = (
        alt.Chart(pd.DataFrame({"tau": [result.tau]}))
        .mark_rule(strokeDash=[4, 4])
        .encode(x=alt.X("tau:Q"))
    )
    st.altair_chart(lines + rule, key="neg_chart")
    st.info(t("negatives.scope"), icon=":material/info:")

link_to_coupled_check()  # issue 28: the check, on the reader's own trainer
show_code(infonce.contrastive, infonce.tau_sweep)
