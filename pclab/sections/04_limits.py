"""04 Equivalence limits: the four conditions for accumulation = one large batch, each broken
live."""

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from pclab.core import gradcache, limits, limits_clip, trajectory
from pclab.ui.exercise import predict_number
from pclab.ui.figures import magnitude
from pclab.ui.input_errors import guard
from pclab.ui.language import page_link, t
from pclab.ui.limits_views import block
from pclab.ui.page_header import header
from pclab.ui.show_code import show_code

DEMOS: dict[str, Callable[..., Any]] = {  # each returns its own result dataclass
    "window": limits.window_update,
    "batchnorm": limits.batchnorm_split,
    "negatives": gradcache.negatives_split,
    "clip": limits_clip.clip_split,
    "summation": trajectory.summation_order,
    "dropout": trajectory.dropout_split,
}


@st.cache_data(max_entries=256, show_spinner=False)
def demo(name: str, **params):
    """The core demonstration `name`, cached on its (already bounded) widget values."""
    return DEMOS[name](**params)


header("limits")
columns = ("condition", "needs", "breaks")
overview = [
    {t(f"limits.overview.{c}"): t(f"limits.overview.{k}.{c}") for c in columns} for k in range(1, 5)
]
st.table(pd.DataFrame(overview), hide_index=True, border="horizontal")  # wraps the long cells
seed = st.number_input(t("limits.seed"), 0, 10_000, 0, key="lim_seed", bind="query-params")
tabs = st.tabs(
    [t(f"limits.tab.{k}") for k in ("objective", "forward", "nonlinear", "trajectory")],
    key="lim_tabs",
)

with tabs[0]:
    c: Sequence[DeltaGenerator] = st.columns(3)  # three columns here, two in places below
    steps = c[0].slider(t("limits.accum_steps"), 1, 8, 4, key="lim_w_steps", bind="query-params")
    lr = c[1].number_input(
        t("limits.lr"), 0.001, 1.0, 0.1, 0.01, key="lim_w_lr", bind="query-params"
    )
    reg = c[2].number_input(
        t("limits.reg"), 0.0, 1.0, 0.05, 0.01, key="lim_w_reg", bind="query-params"
    )
    with guard():
        block(
            "window",
            demo("window", accum_steps=steps, microbatch_size=4, lr=lr, reg=reg, seed=seed),
        )
    page_link(  # issue 41: where a real loop over epochs steps, checked on "Check a trainer"
        "pclab/sections/check_trainer.py",
        label=t("limits.window.to_check"),
        icon=":material/troubleshoot:",
        chk_example="run_tail_never_steps",
    )

with tabs[1]:
    c = st.columns(3)
    size = c[0].slider(t("limits.batch_size"), 2, 64, 8, key="lim_f_size", bind="query-params")
    steps = c[1].slider(t("limits.accum_steps"), 1, 32, 2, key="lim_f_steps", bind="query-params")
    tau = c[2].slider(t("limits.tau"), 0.05, 5.0, 0.5, 0.05, key="lim_f_tau", bind="query-params")
    with guard():
        block("batchnorm", demo("batchnorm", batch_size=size, accum_steps=steps, seed=seed))
    with guard():
        block(
            "negatives", demo("negatives", batch_size=size, accum_steps=steps, tau=tau, seed=seed)
        )
        st.info(t("limits.negatives.recipe"), icon=":material/memory:")

with tabs[2]:
    c = st.columns(2)
    steps = c[0].slider(t("limits.accum_steps"), 1, 16, 4, key="lim_c_steps", bind="query-params")
    max_norm = c[1].slider(
        t("limits.max_norm"), 0.0, 10.0, 1.0, 0.1, key="lim_c_norm", bind="query-params"
    )
    with guard():
        clip = demo("clip", accum_steps=steps, dim=3, max_norm=max_norm, seed=seed)
        norm = {row["variant"]: row["norm"] for row in clip.rows}
        unclipped = magnitude(norm["unclipped_sum"])  # a norm: no sign
        question = t("limits.exercise", norm=unclipped, tau=f"{max_norm:g}")
        scenario = (seed, steps, max_norm)
        # Gate only this block: st.stop() would also blank the trajectory tab.
        if predict_number(
            "lim_ex",
            question,
            norm["clip_of_sum"],
            t("limits.exercise_why"),
            scenario=scenario,
            show=magnitude,
        ):
            block("clip", clip)

with tabs[3]:
    c = st.columns(2)
    count = c[0].select_slider(
        t("limits.count"),
        [100, 1_000, 10_000, 100_000],
        10_000,
        key="lim_s_count",
        bind="query-params",
    )
    replicas = c[1].slider(
        t("limits.replicas"), 1, 64, 4, key="lim_s_replicas", bind="query-params"
    )
    with guard():
        block("summation", demo("summation", count=count, replicas=replicas, seed=seed))
    c = st.columns(3)
    size = c[0].slider(t("limits.batch_size"), 1, 64, 8, key="lim_d_size", bind="query-params")
    steps = c[1].slider(t("limits.accum_steps"), 1, 16, 2, key="lim_d_steps", bind="query-params")
    p = c[2].slider(t("limits.p"), 0.0, 0.9, 0.5, 0.05, key="lim_d_p", bind="query-params")
    with guard():
        block("dropout", demo("dropout", batch_size=size, accum_steps=steps, p=p, seed=seed))

show_code(
    limits.window_update,
    limits.batchnorm_split,
    gradcache.gradient_cache,
    gradcache.negatives_split,
    limits_clip.clip_split,
    trajectory.summation_order,
    trajectory.dropout_split,
)
