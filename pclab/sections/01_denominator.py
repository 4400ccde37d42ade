"""01 Denominator: what counts in N, and every microbatch's share under each scheme."""

import altair as alt
import pandas as pd
import streamlit as st

from pclab.core import denominator, ledger, scenarios
from pclab.ui import deeplink, downloads
from pclab.ui.exercise import predict_number
from pclab.ui.figures import fmt
from pclab.ui.input_errors import guard, table_row
from pclab.ui.language import t
from pclab.ui.page_header import header
from pclab.ui.show_code import show_code

# Text colour too: the dark theme's white on pale red is unreadable (this pair: 8.8:1).
DEPARTS = "background-color: #fde2e1; color: #7a1712"
header("denominator")
left, right = st.columns(2)
replicas = left.number_input(
    t("denominator.replicas"), 1, 8, 2, key="den_replicas", bind="query-params"
)
steps = right.number_input(t("denominator.steps"), 1, 8, 2, key="den_steps", bind="query-params")

COLUMNS = ["positions", "padding", "prompt", "truncated", "loss_sum"]
preset = pd.DataFrame(
    [
        {"replica": r, "microstep": k, **scenarios.denominator_window(r, k)}
        for r in range(replicas)
        for k in range(steps)
    ]
)
st.subheader(t("denominator.table_title"))
st.caption(t("denominator.table_help"))
number = st.column_config.NumberColumn
windows = st.data_editor(
    deeplink.table("den_table", preset, COLUMNS),
    key="den_windows",
    hide_index=True,
    disabled=["replica", "microstep"],
    column_config={
        "replica": number(t("denominator.col_replica")),
        "microstep": number(t("denominator.col_step")),
        **{c: number(t(f"denominator.col_{c}"), min_value=0, step=1) for c in COLUMNS[:4]},
        "loss_sum": number(t("denominator.col_loss_sum"), min_value=0.0, format="%.3f"),
    },
)
deeplink.table_to_url("den_table", windows, preset, COLUMNS)

# Errors name the column and row the reader edits, not core's argument names.
columns = {c: t(f"denominator.col_{c}") for c in COLUMNS}
columns |= {"loss_sums": columns["loss_sum"]}
columns["padding + prompt"] = f"{columns['padding']} + {columns['prompt']}"
with guard(columns):
    rows = windows.to_dict("records")
    names = [f"r{row['replica']}·k{row['microstep']}" for row in rows]
    labels = []
    for name, row in zip(names, rows):
        with table_row(name):
            labels.append(denominator.count_valid_labels(*(row[c] for c in COLUMNS[:4])))
    counts = [[labels[r * steps + k].valid for k in range(steps)] for r in range(replicas)]
    loss_sums = [[rows[r * steps + k]["loss_sum"] for k in range(steps)] for r in range(replicas)]
    n = ledger.global_count(counts)
    loss = ledger.global_loss(loss_sums, counts)
    question, why = t("denominator.exercise"), t("denominator.exercise_why")
    if not predict_number("den_ex", question, n, why, scenario=rows, tolerance=0):
        st.stop()

    m1, m2, m3 = st.columns(3)
    m1.metric(t("denominator.metric_n"), n)
    m2.metric(t("denominator.metric_loss"), fmt(loss))
    m3.metric(t("denominator.metric_input"), sum(label.positions for label in labels))
    if n == 0:
        st.warning(t("denominator.no_objective"), icon=":material/block:")

    kinds = {"valid": "valid", "padding": "padding", "prompt": "prompt", "truncated": "truncated"}
    composition = pd.DataFrame(
        [
            {
                "microbatch": name,
                "kind": t(f"denominator.kind_{kind}"),
                "positions": getattr(label, field),
            }
            for name, label in zip(names, labels)
            for kind, field in kinds.items()
        ]
    )
    st.subheader(t("denominator.composition_title"))
    legend = alt.Legend(orient="bottom", labelLimit=0, columns=2)  # no label cut to "…"
    bars = alt.Chart(composition).mark_bar()
    st.altair_chart(
        bars.encode(
            y=alt.Y("microbatch:N", title=None),
            x=alt.X("positions:Q", title=t("denominator.col_positions")),
            color=alt.Color("kind:N", title=None, legend=legend),
        ),
    )

    st.subheader(t("denominator.weights_title"))
    st.caption(t("denominator.weights_help"))
    shares = {s: ledger.update_shares(counts, s) for s in ledger.SCHEMES}
    table = pd.DataFrame(
        {"microbatch": names, t("denominator.col_valid"): [x.valid for x in labels]}
    )
    for scheme in ledger.SCHEMES:
        table[t(f"schemes.{scheme}")] = [
            shares[scheme][r][k] for r in range(replicas) for k in range(steps)
        ]
    correct = table[t("schemes.global_token")]

    def mark_departures(column: pd.Series) -> list[str]:
        if column.name not in [t(f"schemes.{s}") for s in ledger.SCHEMES[1:]]:
            return [""] * len(column)
        departs = [pd.isna(v) or pd.isna(c) or abs(v - c) > 1e-12 for v, c in zip(column, correct)]
        return [DEPARTS if d else "" for d in departs]

    shares_table = table.style.apply(mark_departures).format(precision=4, na_rep="—")
    microbatch = {"microbatch": t("denominator.col_microbatch")}
    downloads.table(shares_table, "update-shares", hide_index=True, column_config=microbatch)
    for scheme in ledger.SCHEMES:
        if n and any(w is None for row in shares[scheme] for w in row):
            st.info(t("denominator.scheme_undefined", scheme=t(f"schemes.{scheme}")))

    st.subheader(t("denominator.sequence_title"))
    st.markdown(t("denominator.sequence_body"))
    sequence = denominator.sequence_mean_weights([x.valid for x in labels])
    if sequence is None:
        st.info(t("denominator.sequence_undefined"))
    else:
        downloads.table(
            pd.DataFrame(
                {
                    "microbatch": names,
                    t("denominator.col_token_share"): [
                        s for row in shares["global_token"] for s in row
                    ],
                    t("denominator.col_sequence_share"): list(sequence.sequence_shares),
                }
            ).style.format(precision=4, na_rep="—"),
            "objectives",
            hide_index=True,
            column_config=microbatch,
        )

show_code(
    denominator.count_valid_labels,
    ledger.update_shares,
    ledger.microbatch_weights,
    denominator.sequence_mean_weights,
)
