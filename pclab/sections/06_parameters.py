"""06 From representations to parameters: shared encoder scalars, gather backward, DDP's mean,
and a real two-process Gloo run beside the core's prediction."""

import pandas as pd
import streamlit as st
from streamlit.elements.lib.column_types import ColumnConfig

from pclab.core import infonce
from pclab.experiments.negatives import report as negatives_report
from pclab.ui import deeplink, downloads
from pclab.ui.exercise import predict_number
from pclab.ui.figures import fmt
from pclab.ui.input_errors import guard
from pclab.ui.language import t
from pclab.ui.negatives_views import run_check
from pclab.ui.page_header import header
from pclab.ui.run_panel import run_section
from pclab.ui.show_code import show_code
from pclab.ui.trainer_coupled import link_to_coupled_check

SEED = infonce.SEED
number = st.column_config.NumberColumn

header("parameters")
st.markdown(t("parameters.setup"))
st.latex(t("parameters.formula"))


def field(column, name: str, i: int | None, default: float, bound: float, step: float) -> float:
    """One input number, carried in the URL as par_<name>[<i>]."""
    label, suffix = t(f"parameters.controls.{name}", i=i), "" if i is None else i
    return column.number_input(
        label, -bound, bound, default, step, key=f"par_{name}{suffix}", bind="query-params"
    )


cols = st.columns(7)
a = [field(cols[i], "a", i, SEED["a"][i], 10.0, 0.5) for i in range(2)]
b = [field(cols[2 + i], "b", i, SEED["b"][i], 10.0, 0.5) for i in range(2)]
wq = field(cols[4], "wq", None, SEED["wq"], 5.0, 0.25)
wd = field(cols[5], "wd", None, SEED["wd"], 5.0, 0.25)
tau = cols[6].slider(
    t("parameters.controls.tau"), 0.05, 5.0, SEED["tau"], 0.05, key="par_tau", bind="query-params"
)
scheme = deeplink.choice(
    st.segmented_control,
    t("parameters.controls.scheme"),
    infonce.SCHEMES,
    key="par_scheme",
    default=infonce.CORRECT_SCHEME,
    format_func=lambda s: t(f"parameters.scheme.{s}"),
    required=True,
)


def factor(x: float | None) -> str:
    return fmt(None) if x is None else f"×{x:.6g}"


with guard():
    results = {s: infonce.encoder_grads(a, b, wq, wd, tau, s) for s in infonce.SCHEMES}
    chosen = results[scheme]
    question = t("parameters.exercise", scheme=t(f"parameters.scheme.{scheme}"))
    why, scenario = t("parameters.exercise_why"), (a, b, wq, wd, tau, scheme)
    if not predict_number("par_ex", question, chosen.grad_wq, why, scenario=scenario):
        st.stop()
    st.subheader(t("parameters.owner.heading"))
    st.caption(t("parameters.owner.caption"))
    per_rank = zip(chosen.local_loss, chosen.grad_wq_local, chosen.grad_wd_local, strict=True)
    owners = [
        {"rank": t("parameters.owner.row", r=r), "loss": x, "gwq": g, "gwd": h}
        for r, (x, g, h) in enumerate(per_rank)
    ]
    config: dict[str, str | ColumnConfig] = {
        k: number(t(f"parameters.owner.{k}"), format="%+.6f") for k in ("loss", "gwq", "gwd")
    }
    config["rank"] = t("parameters.owner.rank")
    downloads.table(
        pd.DataFrame(owners), "owners", hide_index=True, column_config=config, key="par_owners"
    )
    for column, name in zip(st.columns(4), ("grad_wq", "grad_wd", "reference_wq", "reference_wd")):
        tip = t("parameters.ddp.reference_help") if name.startswith("reference") else None
        column.metric(t(f"parameters.ddp.{name}"), fmt(getattr(chosen, name)), help=tip)
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
    labels = {k: t(f"parameters.compare.{k}") for k in compare.columns}
    config = {**labels, **{k: number(labels[k], format="%+.6f") for k in ("grad_wq", "grad_wd")}}
    factors = {
        f"correction_{w}": [getattr(r, f"correction_{w}") for r in results.values()]
        for w in ("wq", "wd")
    }
    data = compare.assign(**factors)  # the factors as numbers, not "×2"
    downloads.table(
        compare, "recipes", data=data, hide_index=True, column_config=config, key="par_compare"
    )
    st.markdown(t("parameters.ddp_note"))
    st.markdown(t("parameters.accumulation"))

st.subheader(t("parameters.run.heading"))
st.markdown(t("parameters.run.body"))
world_size = st.segmented_control(
    t("parameters.run.world_size"),
    (2, 3, 4),
    default=2,
    required=True,
    key="par_world_size",
    bind="query-params",
)
params = {"world_size": world_size, "tau": tau, "wq": wq, "wd": wd}
run_section(
    "negatives",
    params,
    show=lambda result: run_check(result.report),
    key="par_run",
    button=t("parameters.run.button", world_size=world_size),
    label=t("parameters.run.label", world_size=world_size),
    primary=True,
)

link_to_coupled_check()  # issue 28: the check, on the reader's own trainer
show_code(infonce.encoder_grads, negatives_report.check_run)
