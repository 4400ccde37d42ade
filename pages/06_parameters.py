"""06 From representations to parameters: shared encoder scalars, gather backward, DDP's mean,
and a real two-process Gloo run beside the core's prediction."""

import pandas as pd
import streamlit as st

from core import infonce
from ui.page import fmt, guard, header, show_code, t

RUN_KEY = "par_run_result"  # session state: (run parameters, RunResult) of the last press
SEED = infonce.SEED
number = st.column_config.NumberColumn

header("parameters")
st.markdown(t("parameters.setup"))
st.latex(t("parameters.formula"))

cols = st.columns(7)
a, b = (
    [
        cols[2 * k + i].number_input(
            t(f"parameters.controls.{name}", i=i),
            -10.0,
            10.0,
            SEED[name][i],
            0.5,
            key=f"par_{name}{i}",
            bind="query-params",
        )
        for i in range(2)
    ]
    for k, name in enumerate(("a", "b"))
)
wq, wd = (
    cols[4 + k].number_input(
        t(f"parameters.controls.{name}"), -5.0, 5.0, SEED[name], 0.25, key=f"par_{name}", bind="query-params"
    )
    for k, name in enumerate(("wq", "wd"))
)
tau = cols[6].slider(
    t("parameters.controls.tau"), 0.05, 5.0, SEED["tau"], 0.05, key="par_tau", bind="query-params"
)
scheme = st.segmented_control(
    t("parameters.controls.scheme"),
    infonce.SCHEMES,
    default=infonce.CORRECT_SCHEME,
    required=True,
    format_func=lambda s: t(f"parameters.scheme.{s}"),
    key="par_scheme",
    bind="query-params",
)


def factor(x: float | None) -> str:
    return fmt(None) if x is None else f"×{x:.6g}"


with guard():
    results = {s: infonce.encoder_grads(a, b, wq, wd, tau, s) for s in infonce.SCHEMES}
    chosen = results[scheme]
    st.subheader(t("parameters.owner.heading"))
    st.caption(t("parameters.owner.caption"))
    per_rank = zip(chosen.local_loss, chosen.grad_wq_local, chosen.grad_wd_local, strict=True)
    owners = [
        {"rank": t("parameters.owner.row", r=r), "loss": x, "gwq": g, "gwd": h}
        for r, (x, g, h) in enumerate(per_rank)
    ]
    config = {k: number(t(f"parameters.owner.{k}"), format="%+.6f") for k in ("loss", "gwq", "gwd")}
    config["rank"] = t("parameters.owner.rank")
    st.dataframe(pd.DataFrame(owners), hide_index=True, column_config=config, key="par_owners")
    m = st.columns(4)
    m[0].metric(t("parameters.ddp.grad_wq"), fmt(chosen.grad_wq))
    m[1].metric(t("parameters.ddp.grad_wd"), fmt(chosen.grad_wd))
    m[2].metric(
        t("parameters.ddp.reference_wq"), fmt(chosen.reference_wq), help=t("parameters.ddp.reference_help")
    )
    m[3].metric(
        t("parameters.ddp.reference_wd"), fmt(chosen.reference_wd), help=t("parameters.ddp.reference_help")
    )
    cwq, cwd = factor(chosen.correction_wq), factor(chosen.correction_wd)
    st.markdown(t(f"parameters.explain.{scheme}", n=chosen.world_size, cwq=cwq, cwd=cwd))

    st.subheader(t("parameters.compare.heading"))
    st.caption(t("parameters.compare.caption"))
    compare = pd.DataFrame(
        [
            {
                "scheme": t(f"parameters.scheme.{s}"),
                "grad_wq": r.grad_wq,
                "grad_wd": r.grad_wd,
                "correction_wq": factor(r.correction_wq),
                "correction_wd": factor(r.correction_wd),
            }
            for s, r in results.items()
        ]
    )
    config = {k: t(f"parameters.compare.{k}") for k in compare.columns}
    config.update({k: number(config[k], format="%+.6f") for k in ("grad_wq", "grad_wd")})
    st.dataframe(compare, hide_index=True, column_config=config, key="par_compare")
    st.markdown(t("parameters.ddp_note"))
    st.markdown(t("parameters.accumulation"))

st.subheader(t("parameters.run.heading"))
st.markdown(t("parameters.run.body"))
world_size = st.segmented_control(
    t("parameters.run.world_size"), (2, 3, 4), default=2, required=True, key="par_world_size"
)
params = {"world_size": world_size, "tau": tau, "wq": wq, "wd": wd}
if st.button(t("parameters.run.button"), key="par_run", icon=":material/play_arrow:", type="primary"):
    from runners import negatives  # imported on demand: rendering the page never loads the runner
    from ui.runs import run_with_status

    label = t("parameters.run.label", world_size=world_size)
    st.session_state[RUN_KEY] = (params, run_with_status(label, negatives.run, **params))
stored_params, result = st.session_state.get(RUN_KEY, (None, None))
if stored_params == params and result is not None and result.ok:
    report = result.report
    with guard():
        rows = infonce.check_run(report)
        used = {k: report[k] for k in ("a", "b", "wq", "wd", "tau", "lr", "backend")}
        st.caption(t("parameters.run.inputs", **used))
        text = {
            "scheme": lambda s: t(f"parameters.scheme.{s}"),
            "measured_wq": fmt,
            "measured_wd": fmt,
            "max_abs_diff": lambda x: fmt(None) if x is None else f"{x:.1e}",
            "agree": lambda ok: t("common.yes") if ok else t("common.no"),
        }
        table = pd.DataFrame([{k: text[k](x) if k in text else x for k, x in row.items()} for row in rows])
        config = {k: t(f"parameters.run.{'diff' if k == 'max_abs_diff' else k}") for k in table.columns}
        config.update({k: number(config[k], format="%+.6f") for k in ("predicted_wq", "predicted_wd")})
        st.dataframe(table, hide_index=True, column_config=config, key="par_run_table")
        if all(row["agree"] for row in rows):
            worst = f"{max(row['max_abs_diff'] for row in rows):.1e}"
            st.success(
                t("parameters.run.agree_all", tol=f"{infonce.RUN_TOL:.0e}", diff=worst),
                icon=":material/check:",
            )
        else:
            failing = ", ".join(t(f"parameters.scheme.{r['scheme']}") for r in rows if not r["agree"])
            st.warning(t("parameters.run.disagree", schemes=failing), icon=":material/warning:")

show_code(infonce.encoder_grads, infonce.check_run)
