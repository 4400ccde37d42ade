"""Full Transformer experiment: the lab's trained 298,176-parameter model, one update split in
time (accumulation) and in space (Gloo processes), compared with the full batch at 2e-10."""

import re

import altair as alt
import pandas as pd
import streamlit as st

from runners import transformer
from runners.lm import data
from ui import deeplink, downloads
from ui.branch_table import VERDICTS, table, verdict
from ui.exercise import predict_choice
from ui.page import guard, header, show_code, t

RUN_KEY = "exp_run_result"  # session state: (run parameters, RunResult) of the last press


@st.cache_resource(show_spinner=False)
def windows_and_tokenizer():
    from runners.lm import artifacts  # hash-checks the corpus and tokenizer before use

    return data.experiment_windows(artifacts.tokenizer()), artifacts.tokenizer()


def md(text: str) -> str:
    """Plain text for Markdown: special characters escaped, line breaks shown as ⏎."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|~<>$:])", r"\\\1", text).replace("\n", " ⏎ ")


header("experiment")
st.markdown(t("experiment.setup"))
c1, c2 = st.columns(2)
optimizer = deeplink.choice(
    c1.segmented_control,
    t("experiment.run.optimizer"),
    tuple(transformer.OPTIMIZER_CHOICES),
    key="exp_optimizer",
    default="both",
    format_func=lambda o: t(f"experiment.optimizer.{o}"),
    required=True,
)
world_size = c2.segmented_control(
    t("experiment.run.world_size"),
    (2, 4),
    default=2,
    required=True,
    key="exp_world_size",
    bind="query-params",
)
labels = []
with guard():
    windows, tokenizer = windows_and_tokenizer()
    st.subheader(t("experiment.windows.heading"))
    st.caption(t("experiment.windows.caption"))
    for i, (window, default) in enumerate(zip(windows, data.DEFAULT_LABELS, strict=True)):
        left, right = st.columns([1, 5])
        n = left.number_input(
            t("experiment.windows.labels", i=i),
            0,
            window.capacity,
            default,
            1,
            key=f"exp_labels{i}",
            bind="query-params",
        )
        labels.append(int(n))
        rank = next(r for r, rows in enumerate(transformer.rank_windows(world_size)) if i in rows)
        where = "tail" if window.index == "tail" else "chunk"
        right.caption(
            t(
                f"experiment.windows.{where}",
                i=i,
                document=window.document,
                index=window.index,
                rank=rank,
                capacity=window.capacity,
                padding=window.padding,
            )
        )
        plain, supervised = data.split_text(tokenizer, window, n)
        right.markdown(md(plain) + (f":orange-background[{md(supervised)}]" if supervised else ""))

    counts = transformer.label_counts(labels, world_size)
    answer = VERDICTS[transformer.expected_correct("ddp_mean_of_means", labels, world_size)]  # not a run
    question, why = t("experiment.exercise", world_size=world_size), t("experiment.exercise_why")
    scenario = (tuple(labels), world_size, optimizer)
    if not predict_choice("exp_ex", question, [*VERDICTS.values()], answer, why, verdict, scenario=scenario):
        st.stop()
    st.subheader(t("experiment.predict.heading"))
    parts = {k: " + ".join(map(str, counts[k])) for k in ("microbatches", "ranks")}
    st.markdown(t("experiment.predict.counts", n=counts["num_valid_labels"], **parts))
    table(transformer.predictions(labels, world_size, optimizer), "exp_predictions")

st.subheader(t("experiment.run.heading"))
st.markdown(t("experiment.run.body"))
params = {"labels": tuple(labels), "world_size": world_size, "optimizer": optimizer}
if st.button(t("experiment.run.button"), key="exp_run", icon=":material/play_arrow:", type="primary"):
    from ui.runs import run_with_status  # on demand: rendering the page never starts a run

    label = t("experiment.run.label", world_size=world_size)
    st.session_state[RUN_KEY] = (params, run_with_status(label, transformer.run, **params))
stored, result = st.session_state.get(RUN_KEY, (None, None))
if stored == params and result is not None and result.ok:
    report, measured = result.report, ("max_abs_diff", "passed", "first", "hashes")
    st.subheader(t("experiment.results.heading"))
    tol, seconds = f"{report['tolerance']:.0e}", f"{result.seconds:.0f}"
    st.caption(t("experiment.results.caption", n=report["num_valid_labels"], seconds=seconds, tol=tol))
    table(report["branches"], "exp_results", measured)

    chart = pd.DataFrame(transformer.chart_rows(report["branches"]))
    chart["branch"] = chart["branch"].map(lambda b: t(f"experiment.branch.{b}"))
    points = alt.Chart(chart).mark_point(filled=True, opacity=0.8).encode(
        x=alt.X("tensor:N", sort=None, title=t("experiment.chart.tensor")),
        y=alt.Y("plotted:Q", scale=alt.Scale(type="log"), title=t("experiment.chart.diff")),
        color=alt.Color("branch:N", title=t("experiment.results.branch")),
        shape=alt.Shape("optimizer:N", title=t("experiment.results.optimizer")),
        tooltip=["branch", "optimizer", "tensor", alt.Tooltip("abs_diff:Q", format=".3e")],
    )  # fmt: skip
    rule = alt.Chart(pd.DataFrame({"y": [report["tolerance"]]})).mark_rule(strokeDash=[4, 4]).encode(y="y:Q")
    st.subheader(t("experiment.chart.heading"))
    st.altair_chart(points + rule, key="exp_chart")
    st.caption(t("experiment.chart.caption", floor=f"{transformer.DIFF_FLOOR:.0e}"))

    control = report["equal_count_control"]
    st.subheader(t("experiment.control.heading"))
    st.markdown(t("experiment.control.body", labels=", ".join(map(str, control["labels"]))))
    table(control["branches"], "exp_control", measured)

    zero, adamw = report["zero_labels"], report["zero_labels"]["by_optimizer"]["adamw"]
    st.subheader(t("experiment.zero.heading"))
    steps = {"before": int(adamw["steps_before"][0]), "after": int(adamw["steps_after_naive"][0])}
    st.markdown(t("experiment.zero.body", **steps))
    z1, z2, z3 = st.columns(3)
    z1.metric(t("experiment.zero.skip"), t("common.yes") if zero["skip_state_identical"] else t("common.no"))
    changed = ", ".join(t(f"experiment.zero.kind.{k}") for k in adamw["naive_changed"])
    z2.metric(t("experiment.zero.changed"), changed or t("experiment.zero.none"))
    z3.metric(t("experiment.zero.max_change"), f"{adamw['naive_max_weight_change']:.2e}")
    downloads.run_download(result, stored, "transformer")

st.info(t("experiment.scope"), icon=":material/info:")
with st.expander(t("experiment.branch_code"), icon=":material/code:"):
    st.code((data.ROOT / "runners" / "lm" / "branches.py").read_text(encoding="utf-8"), language="python")
show_code(data.supervised_targets, transformer.expected_correct, transformer.label_counts)
