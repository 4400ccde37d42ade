"""03 Framework semantics: the P/N coefficient, collectives, double scaling, regularisers."""

import math
from typing import Literal

import pandas as pd
import streamlit as st

from pclab.core import framework, ledger
from pclab.core.scenarios import FRAMEWORK_DEFAULT
from pclab.ui import deeplink, downloads
from pclab.ui.exercise import predict_number
from pclab.ui.figures import fmt
from pclab.ui.framework_views import protocol_steps
from pclab.ui.input_errors import guard
from pclab.ui.language import coded_choice, t
from pclab.ui.page_header import header
from pclab.ui.show_code import show_code

header("framework")
c1, c2 = st.columns(2)
replicas = c1.number_input(t("framework.replicas"), 1, 8, 2, key="fw_replicas", bind="query-params")
steps = c2.number_input(t("framework.steps"), 1, 8, 2, key="fw_steps", bind="query-params")


def preset(r: int, k: int, field: Literal["counts", "grad_sums"]) -> float:
    rows = FRAMEWORK_DEFAULT[field]
    return rows[r][k] if r < len(rows) and k < len(rows[r]) else (4 if field == "counts" else 1.0)


st.subheader(t("framework.table_title"))
preset_rows = [
    {
        "replica": r,
        "microstep": k,
        "n": preset(r, k, "counts"),
        "grad_sum": preset(r, k, "grad_sums"),
    }
    for r in range(replicas)
    for k in range(steps)
]
fw_preset = pd.DataFrame(preset_rows).assign(weight_sum=lambda df: df["n"].astype(float))
EDITABLE = ["n", "grad_sum", "weight_sum"]
table = st.data_editor(
    deeplink.table("fw_cells", fw_preset, EDITABLE),
    key="fw_table",
    hide_index=True,
    disabled=["replica", "microstep"],
    column_config={
        "replica": st.column_config.NumberColumn(t("framework.col_replica")),
        "microstep": st.column_config.NumberColumn(t("framework.col_step")),
        "n": st.column_config.NumberColumn(t("framework.col_count"), min_value=0, step=1),
        "grad_sum": st.column_config.NumberColumn(t("framework.col_grad_sum"), format="%.4f"),
        "weight_sum": st.column_config.NumberColumn(t("framework.col_weight_sum"), min_value=0.0),
    },
)
deeplink.table_to_url("fw_cells", table, fw_preset, EDITABLE)
o1, o2 = st.columns(2)


collective = coded_choice(
    o1.radio,
    "framework.collective",
    ledger.COLLECTIVES,
    key="fw_collective",
    default="mean",
    labels="framework.collective_",
)
loss_input = coded_choice(
    o1.radio,
    "framework.loss_input",
    framework.LOSS_INPUTS,
    key="fw_input",
    default="sum",
    labels="framework.loss_input_",
)
divide_by_accum = o1.checkbox(t("framework.divide_by_accum"), key="fw_double", bind="query-params")
reg_grad = o2.number_input(
    t("framework.reg_grad"),
    -1e6,
    1e6,
    FRAMEWORK_DEFAULT["reg_grad"],
    key="fw_reg",
    bind="query-params",
)
placement = coded_choice(
    o2.radio,
    "framework.reg_placement",
    framework.REGULARISER_PLACEMENTS,
    key="fw_placement",
    default="once",
    labels="framework.placement_",
)

names = {"grad_sums": "col_grad_sum", "counts": "col_count", "weight_sums": "col_weight_sum"}
with guard({field: t(f"framework.{label}") for field, label in names.items()}):
    cells = table.to_dict("records")

    def grid(field: str) -> list[list]:
        return [[cells[r * steps + k][field] for k in range(steps)] for r in range(replicas)]

    update = framework.framework_update(
        grid("grad_sum"), grid("n"), collective, loss_input, divide_by_accum, reg_grad, placement
    )
    scenario = (cells, collective, loss_input, divide_by_accum, reg_grad, placement)
    if not predict_number(
        "fw_ex",
        t("framework.exercise"),
        update.applied_gradient,
        t("framework.exercise_why"),
        scenario=scenario,
    ):
        st.stop()
    applied, reference = update.applied_gradient, update.reference_gradient
    if update.skip or applied is None or reference is None:  # N = 0: both undefined
        st.warning(t("framework.skip"), icon=":material/block:")
    elif not all(map(math.isfinite, (applied, reference))):
        # float64 ran out (sums near 1e308): neither figure can be compared, so no verdict.
        st.error(t("framework.overflow"), icon=":material/error:")
    else:
        m1, m2, m3 = st.columns(3)
        m1.metric(t("framework.metric_applied"), fmt(applied))
        m2.metric(t("framework.metric_reference"), fmt(reference))
        m3.metric(t("framework.metric_ratio"), update.regulariser_multiplier)
        gap = applied - reference
        if abs(gap) <= 1e-12 * max(1.0, abs(reference)):
            st.success(t("framework.verdict_ok"))
        else:
            st.error(t("framework.verdict_bad", diff=fmt(gap)))
        headers = [t(f"framework.col_{c}") for c in ("replica", "step", "count", "coefficient")]
        coefficients = [c for row in update.coefficients for c in row]  # None: no backward
        values = [(c["replica"], c["microstep"], c["n"], x) for c, x in zip(cells, coefficients)]
        raw = pd.DataFrame(values, columns=headers)
        shown = [t("framework.skipped_microbatch") if c is None else fmt(c) for c in coefficients]
        downloads.table(
            raw.assign(**{headers[3]: shown}), "coefficients", data=raw, hide_index=True
        )
        protocol_steps(update, grid("n"), collective, divide_by_accum)
        with st.expander(t("framework.weights_title")):
            weights = grid("weight_sum")
            st.markdown(
                t(
                    "framework.weights_body",
                    mean=fmt(framework.weighted_loss_scale(weights, "mean")),
                    sum=fmt(framework.weighted_loss_scale(weights, "sum")),
                )
            )
    st.info(t("framework.adamw_note"), icon=":material/info:")

show_code(framework.framework_update, ledger.local_loss_scale, framework.regulariser_multiplier)
