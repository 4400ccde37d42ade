"""07 Validation: a coverage matrix filled from real checks, and what DistributedSampler feeds
each rank."""

import pandas as pd
import streamlit as st

from pclab.core import coverage, coverage_checks, sampler
from pclab.experiments.transformer import coverage as transformer_coverage
from pclab.experiments.transformer.lm import data
from pclab.ui import deeplink, downloads
from pclab.ui.coverage_views import count_input, matrix_table, names, num, sampler_epoch_view
from pclab.ui.exercise import predict_number
from pclab.ui.input_errors import guard
from pclab.ui.language import t
from pclab.ui.page_header import header
from pclab.ui.run_panel import run_panel
from pclab.ui.show_code import show_code

text_column = st.column_config.TextColumn


@st.cache_data(max_entries=16, show_spinner=False)
def checks(slip: str, seed: int) -> coverage_checks.CheckRun:
    return coverage_checks.run_checks(slip, seed)


header("validation")
st.markdown(t("validation.method"))

st.subheader(t("validation.matrix.heading"))
st.markdown(t("validation.matrix.body"))
c = st.columns(2)
label, slips = t("validation.matrix.slip"), coverage_checks.SLIPS
slip = deeplink.choice(
    c[0].selectbox,
    label,
    slips,
    key="val_slip",
    default=slips[0],
    format_func=lambda s: names("slip", [s]),
)
seed = count_input(c[1], "matrix.seed", 0, 10_000, 0, "val_seed")
with guard():
    run = checks(slip, seed)
    matrix = coverage.coverage_matrix(run.evidence)
    matrix_table(matrix, "coverage-matrix")
    st.caption(t("validation.matrix.legend"))
    if matrix.broken:
        st.error(
            t(
                "validation.matrix.broken",
                cells=names("row", dict.fromkeys(r for r, _ in matrix.broken)),
            )
        )
    if matrix.blind_rows:
        blind = t("validation.matrix.blind", rows=names("row", matrix.blind_rows))
        st.warning(blind, icon=":material/visibility_off:")
    if matrix.uncovered_columns:
        st.error(
            t("validation.matrix.uncovered", columns=names("column", matrix.uncovered_columns))
        )
    elif not matrix.broken:
        st.success(t("validation.matrix.covered"))
    with st.expander(t("validation.details.heading")):
        raw = pd.DataFrame(run.details).drop(columns=["replicas", "accum_steps"])
        raw["row"], raw["counts"] = (
            [names("row", [r]) for r in raw["row"]],
            raw["counts"].astype(str),
        )
        figures = ("reference_loss", "slip_loss", "reference_norm")  # text on the page, data below
        details = raw.assign(**{c: [num(x) for x in raw[c]] for c in figures})
        config = {c: text_column(t(f"validation.details.{c}")) for c in details.columns}
        downloads.table(
            details,
            "coverage-scenarios",
            data=raw,
            hide_index=True,
            column_config=config,
            key="val_details",
        )

st.subheader(t("validation.torchrun.heading"))
st.markdown(t("validation.torchrun.body"))
params = {"labels": data.DEFAULT_LABELS, "world_size": 2}
result = run_panel(
    "transformer",
    params,
    key="val_torchrun",
    button=t("validation.torchrun.button"),
    label=t("validation.torchrun.label"),
)
evidence: tuple[coverage.Evidence, ...] = ()
if result is not None:
    with guard():
        evidence = transformer_coverage.evidence_from_transformer(result.report)
missing = "not_reported" if evidence else "not_run"
matrix_table(coverage.coverage_matrix(evidence, "torchrun"), "coverage-torchrun", missing)
st.caption(t("validation.torchrun.scope"))

st.subheader(t("validation.sampler.heading"))
st.markdown(t("validation.sampler.body"))
cols = st.columns(5)
size = count_input(cols[0], "sampler.dataset_size", 1, 10_000, 10, "val_size")
world = count_input(cols[1], "sampler.world_size", 1, 64, 4, "val_world")
sampler_seed = count_input(cols[2], "sampler.seed", 0, 2**31 - 1, 0, "val_sampler_seed")
epoch_index = count_input(cols[3], "sampler.epoch", 0, 1000, 0, "val_epoch")
drop_last = cols[4].toggle(
    t("validation.sampler.drop_last"), key="val_drop_last", bind="query-params"
)
with guard():
    e = sampler.sampler_epoch(size, world, sampler_seed, epoch_index, drop_last)  # <= ~50 ms
    question = t("validation.sampler.exercise", n=size, p=world)
    why = t("validation.sampler.exercise_why")
    scenario = (size, world, sampler_seed, epoch_index, drop_last)
    answered = predict_number(
        "val_ex", question, e.repeated_entries, why, scenario=scenario, tolerance=0
    )
    if not answered:
        st.stop()  # the sampler's figures are the last section: only they (and the code) wait
    sampler_epoch_view(e)

show_code(
    coverage_checks.run_checks,
    coverage.coverage_matrix,
    transformer_coverage.evidence_from_transformer,
    sampler.sampler_epoch,
)
