"""02 Two-replica ledger: the seed's panel, right vs wrong averaging, and one SGD step."""

import altair as alt
import pandas as pd
import streamlit as st

from pclab.core import ledger
from pclab.core.scenarios import LEDGER_SEED
from pclab.ui import deeplink, downloads
from pclab.ui.exercise import predict_number
from pclab.ui.figures import fmt
from pclab.ui.input_errors import guard
from pclab.ui.language import t
from pclab.ui.page_header import header
from pclab.ui.show_code import show_code

header("ledger")
c1, c2, c3 = st.columns(3)
n_a = c1.number_input(
    t("ledger.count_a"), 0, 10_000, LEDGER_SEED["counts"][0], key="ledger_n_a", bind="query-params"
)
n_b = c1.number_input(
    t("ledger.count_b"), 0, 10_000, LEDGER_SEED["counts"][1], key="ledger_n_b", bind="query-params"
)
target_a = c2.number_input(
    t("ledger.target_a"),
    -1e6,
    1e6,
    LEDGER_SEED["targets"][0],
    key="ledger_target_a",
    bind="query-params",
)
target_b = c2.number_input(
    t("ledger.target_b"),
    -1e6,
    1e6,
    LEDGER_SEED["targets"][1],
    key="ledger_target_b",
    bind="query-params",
)
theta = c3.number_input(
    t("ledger.theta"), -1e6, 1e6, LEDGER_SEED["theta"], key="ledger_theta", bind="query-params"
)
lr = c3.number_input(
    t("ledger.lr"),
    0.0,
    10.0,
    LEDGER_SEED["lr"],
    format="%.4f",
    key="ledger_lr",
    bind="query-params",
)
wrong = deeplink.choice(
    st.segmented_control,
    t("ledger.implementation"),
    ledger.SCHEMES[1:],
    key="ledger_scheme",
    default="replica_mean",
    format_func=lambda s: t(f"schemes.{s}"),
)

with guard():
    result = ledger.quadratic_ledger((n_a, n_b), (target_a, target_b), theta, lr)
    correct, current = result.gradients["global_token"], result.gradients[wrong]
    question = t("ledger.exercise", scheme=t(f"schemes.{wrong}"))
    scenario = (n_a, n_b, target_a, target_b, theta, lr, wrong)
    if not predict_number(
        "ledger_ex", question, current, t("ledger.exercise_why"), scenario=scenario
    ):
        st.stop()

    def shown(value: float | None, theta_value: bool = False) -> str:
        if result.skip:
            return f"{fmt(theta)} · {t('common.skipped')}" if theta_value else t("common.skipped")
        return t("ledger.unavailable") if value is None else fmt(value)

    m1, m2, m3, m4 = st.columns(4)
    m1.metric(t("ledger.metric_correct"), shown(correct))
    m2.metric(t("ledger.metric_current"), shown(current))
    m3.metric(
        t("ledger.metric_theta_correct"),
        shown(result.theta_after["global_token"], theta_value=True),
    )
    m4.metric(t("ledger.metric_theta_current"), shown(result.theta_after[wrong], theta_value=True))

    if result.skip or correct is None:  # N = 0: no objective, every replica skips
        st.warning(t("ledger.skip_note", theta=fmt(theta)), icon=":material/block:")
    elif current is None:
        st.info(t("ledger.unavailable_note", scheme=t(f"schemes.{wrong}")))
    else:
        if result.reversed[wrong]:
            st.error(t("ledger.reversed_note"), icon=":material/u_turn_left:")
        elif abs(current - correct) <= 1e-15:
            st.success(t("ledger.agree_note"))
        else:
            st.warning(t("ledger.differ_note", diff=fmt(current - correct)))
        st.markdown(
            t("ledger.formula", correct=fmt(correct), replica=fmt(result.gradients["replica_mean"]))
        )

    st.subheader(t("ledger.table_title"))
    downloads.table(
        pd.DataFrame(
            {
                t("ledger.col_replica"): ["A", "B"],
                t("ledger.col_count"): result.counts,
                t("ledger.col_token_grad"): result.per_token_grads,
                t("ledger.col_grad_sum"): result.grad_sums,
                t("ledger.col_share"): result.correct_shares,
            }
        ).style.format(precision=4, na_rep="—"),
        "ledger",
        hide_index=True,
    )

    total = n_a + n_b
    if 0 < total <= 2_000:
        st.subheader(t("ledger.sweep_title", total=total))
        st.caption(t("ledger.sweep_help"))
        sweep = pd.DataFrame(ledger.split_sweep(total, (target_a, target_b), theta))
        lines = sweep.melt("n_a", ["global_token", wrong], var_name="scheme", value_name="gradient")
        lines["series"] = lines["scheme"].map(
            {"global_token": t("ledger.series_correct"), wrong: t("ledger.series_current")}
        )
        bands = sweep[sweep[f"{wrong}_reversed"] == True]  # noqa: E712 (None must not match)
        x = alt.X("n_a:Q", title=t("ledger.axis_split"))
        chart = (
            alt.Chart(bands.assign(lo=bands.n_a - 0.5, hi=bands.n_a + 0.5))
            .mark_rect(color="#f8c9c6", opacity=0.6)
            .encode(x=alt.X("lo:Q"), x2=alt.X2("hi"), tooltip=alt.value(t("ledger.reversal_band")))
            + alt.Chart(lines.dropna())
            .mark_line(point=True)
            .encode(
                x=x,
                y=alt.Y("gradient:Q", title=t("ledger.axis_gradient")),
                color=alt.Color("series:N", title=None),
            )
            + alt.Chart(pd.DataFrame({"n_a": [n_a]}))
            .mark_rule(strokeDash=[4, 4])
            .encode(x=alt.X("n_a:Q"))
        )
        st.altair_chart(chart)

show_code(ledger.quadratic_ledger, ledger.reduce_gradient, ledger.split_sweep)
