"""09 Coordinate the step: an overflow on one rank, and the four steps every rank takes together."""

import math
from typing import Final, Literal

import streamlit as st

from pclab.core import clipping
from pclab.ui import i18n
from pclab.ui.clipping_run_view import step_results
from pclab.ui.exercise import predict_choice
from pclab.ui.figures import fmt, magnitude
from pclab.ui.input_errors import guard
from pclab.ui.language import coded_choice, lang, t
from pclab.ui.page_header import header
from pclab.ui.rank_table import rank_label, rank_table
from pclab.ui.run_panel import run_section
from pclab.ui.show_code import show_code

LR = 0.1
URL: Final = "query-params"  # numbers travel in the link as they are
FINITE_RUN = {"inject_overflow": None, "nonfinite": "inf"}
Color = Literal["green", "red", "orange", "gray"]  # st.badge's, those this page uses
BADGE: dict[str, tuple[Color, str]] = {"ok": ("green", ":material/check:")}
BADGE |= {"wrong": ("red", ":material/close:"), "latent": ("orange", ":material/visibility_off:")}
BADGE["skipped"] = ("gray", ":material/block:")
DECISIONS = ("all_skip", "all_step", "split")


def given(x: float) -> str:  # an injected inf or NaN is an input: named, not "undefined"
    kind = "nan" if math.isnan(x) else "inf"
    return fmt(x) if math.isfinite(x) else t(f"clipping.injections.{kind}")


header("step")
c1, c2, c3 = st.columns(3)
layout = coded_choice(
    c1.selectbox,
    "clipping.scenario",
    tuple(clipping.SCENARIOS),
    key="step_layout",
    default="seed_replicated",
    labels="clipping.scenarios.",
)
scale = c1.number_input(t("clipping.scale"), value=8.0, key="step_scale", bind=URL)
tau = c1.number_input(t("clipping.threshold"), value=1.0, key="step_threshold", bind=URL)
inject = coded_choice(
    c2.selectbox,
    "clipping.inject",
    ("none", *clipping.INJECTIONS),
    key="step_inject",
    default="inf",
    labels="clipping.injections.",
)
# "rank 0" and parameter ids read the same in every language: safe as URL values.
inject_rank = c2.selectbox(
    t("clipping.inject_rank"), (0, 1), 1, rank_label, key="step_rank", bind=URL
)
held = tuple(clipping.scenario_grads(layout, 1.0)[inject_rank])
inject_id = c2.selectbox(t("step.inject_id"), held, key="step_inject_id", bind=URL)
variant = coded_choice(
    c3.radio,
    "clipping.variant",
    clipping.VARIANTS,
    key="step_variant",
    default="global",
    labels="clipping.variants.",
)
st.caption(t("clipping.setup", scale=magnitude(scale), lr=magnitude(LR)))

with guard({"scale": t("clipping.scale"), "max_norm": t("clipping.threshold")}):
    injection = None if inject == "none" else (inject_rank, inject_id, inject)
    grads = clipping.scenario_grads(layout, scale, inject=injection)
    report = clipping.clip_report(grads, tau, scale, LR)
    marks = clipping.protocol_marks(report, variant)
    steps = report.outcomes[variant]
    skipping = [rank_label(s.rank) for s in steps if s.skip]
    stepping = [rank_label(s.rank) for s in steps if not s.skip]
    decision = "all_skip" if not stepping else "all_step" if not skipping else "split"
    question, why = (
        t("step.exercise", variant=t(f"clipping.variants.{variant}")),
        t("step.exercise_why"),
    )
    scenario = (layout, scale, tau, inject, inject_rank, inject_id, variant)
    label = lambda k: t(f"step.decision.{k}")  # noqa: E731
    if not predict_choice("step_ex", question, DECISIONS, decision, why, label, scenario=scenario):
        st.stop()
    norms = " / ".join(dict.fromkeys(magnitude(s.norm) for s in steps if not s.skip))  # no sign
    coefficients = " / ".join(dict.fromkeys(magnitude(s.coefficient) for s in steps if not s.skip))
    flags = [
        t(f"step.flag_{'nonfinite' if b else 'finite'}", rank=r)
        for r, b in enumerate(report.nonfinite)
    ]
    figures = {
        "unscale": " · ".join(flags),
        "agree": t(
            f"step.{decision}",
            skipping=i18n.join(lang(), skipping),
            stepping=i18n.join(lang(), stepping),
        ),
        "reduce": t("common.skipped")
        if not stepping
        else t("step.norm_line", norm=norms, c=coefficients),
        "update": " · ".join(t("step.count_line", rank=s.rank, steps=s.step) for s in steps),
    }
    for column, name in zip(st.columns(4), clipping.PROTOCOL, strict=True):
        with column.container(border=True):
            st.markdown(f"{t(f'step.steps.{name}.kicker')}  \n**{t(f'step.steps.{name}.title')}**")
            st.markdown(t(f"step.steps.{name}.body"))
            color, icon = BADGE[marks[name]]
            st.badge(t(f"step.marks.{marks[name]}"), color=color, icon=icon)
            st.markdown(figures[name])

    (st.error if "wrong" in marks.values() else st.info)(t(f"clipping.why.{variant}"))
    if report.diverged[variant]:
        st.error(t("step.diverged_note"), icon=":material/call_split:")
    elif report.skip and variant != "local_skip":
        st.success(t("step.skip_note"), icon=":material/pause_circle:")

    st.subheader(t("clipping.table_title"))
    rank_table(report, steps, given, lambda c: t(f"step.col.{c}"), with_steps=True)
    st.caption(t("step.scope"))

st.subheader(t("clipping.run_title"))
st.caption(t("step.run_caption"))
# The real run writes the non-finite value into the chosen rank's own shard (w0 or w1).
params = FINITE_RUN if inject == "none" else {"inject_overflow": inject_rank, "nonfinite": inject}
run_section(
    "clipping",
    params,
    show=step_results,
    key="step_run",
    button=t("clipping.run_button"),
    label=t("clipping.run_label"),
    record="coordinated-step",
)

show_code(clipping.clip_report, clipping.protocol_marks)
