"""Full Transformer experiment: the lab's trained 298,176-parameter model, one update split in
time (accumulation) and in space (Gloo processes), compared with the full batch at 2e-10."""

import streamlit as st

from pclab.experiments.transformer import params as plan
from pclab.experiments.transformer.lm import data
from pclab.ui import deeplink
from pclab.ui.branch_table import VERDICTS, verdict
from pclab.ui.branch_table import table as branch_table
from pclab.ui.exercise import predict_choice
from pclab.ui.input_errors import guard
from pclab.ui.language import page_link, t
from pclab.ui.page_header import header
from pclab.ui.run_panel import run_section
from pclab.ui.show_code import show_code
from pclab.ui.transformer_views import labelled, md, run_results


@st.cache_resource(show_spinner=False)
def windows_and_tokenizer():
    """The four windows and the committed tokenizer (both hash-checked before use)."""
    tokenizer = data.committed_tokenizer()
    return data.experiment_windows(tokenizer), tokenizer


header("experiment")
st.markdown(t("experiment.setup"))
c1, c2 = st.columns(2)
optimizer = deeplink.choice(
    c1.segmented_control,
    t("experiment.run.optimizer"),
    tuple(plan.OPTIMIZER_CHOICES),
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
    page_link(  # issue 41: the tail window in a loop over epochs, on "Check a trainer"
        "pclab/sections/check_trainer.py",
        label=t("experiment.windows.to_check"),
        icon=":material/troubleshoot:",
        chk_example="run_divide_by_k",
    )
    for i, (window, default) in enumerate(zip(windows, data.DEFAULT_LABELS, strict=True)):
        left, right = st.columns([1, 5])
        label = t("experiment.windows.labels", i=i)
        n = left.number_input(
            label, 0, window.capacity, default, 1, key=f"exp_labels{i}", bind="query-params"
        )
        labels.append(int(n))
        rank = next(r for r, rows in enumerate(plan.rank_windows(world_size)) if i in rows)
        where = "tail" if window.index == "tail" else "chunk"
        shape = {"capacity": window.capacity, "padding": window.padding}
        document = t(f"experiment.document.{window.document}")
        about = {"i": i, "document": document, "index": window.index, "rank": rank}
        right.caption(t(f"experiment.windows.{where}", **about, **shape))
        plain, supervised = data.split_text(tokenizer, window, n)
        right.markdown(md(plain) + labelled(supervised), unsafe_allow_html=True)

    counts = plan.label_counts(labels, world_size)
    predicted = plan.expected_correct("ddp_mean_of_means", labels, world_size)  # not a run
    answer = VERDICTS[predicted]
    question, why = t("experiment.exercise", world_size=world_size), t("experiment.exercise_why")
    scenario = (tuple(labels), world_size, optimizer)
    if not predict_choice(
        "exp_ex", question, [*VERDICTS.values()], answer, why, verdict, scenario=scenario
    ):
        st.stop()
    st.subheader(t("experiment.predict.heading"))
    parts = {k: " + ".join(map(str, counts[k])) for k in ("microbatches", "ranks")}
    st.markdown(t("experiment.predict.counts", n=counts["num_valid_labels"], **parts))
    branch_table(plan.predictions(labels, world_size, optimizer), "exp_predictions")

st.subheader(t("experiment.run.heading"))
st.markdown(t("experiment.run.body"))
params = {"labels": tuple(labels), "world_size": world_size, "optimizer": optimizer}
run_section(
    "transformer",
    params,
    show=run_results,
    key="exp_run",
    button=t("experiment.run.button"),
    label=t("experiment.run.label", world_size=world_size),
    primary=True,
)

st.info(t("experiment.scope"), icon=":material/info:")
with st.expander(t("experiment.branch_code"), icon=":material/code:"):
    branches = data.ROOT / "experiments" / "transformer" / "lm" / "branches.py"
    st.code(branches.read_text(encoding="utf-8"), language="python")
show_code(data.supervised_targets, plan.expected_correct, plan.label_counts)
