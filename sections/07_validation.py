"""07 Validation: a coverage matrix filled from real checks, and what DistributedSampler feeds each rank."""

import math

import altair as alt
import pandas as pd
import streamlit as st

from core import coverage, coverage_checks, sampler
from ui import deeplink, downloads
from ui.coverage_rows import coverage_rows
from ui.exercise import predict_number
from ui.page import fmt, guard, header, show_code, t

TORCHRUN_KEY = "val_torchrun_requested"  # session state: the user asked for the real run
text_column = st.column_config.TextColumn


@st.cache_data(max_entries=16, show_spinner=False)
def checks(slip: str, seed: int) -> coverage_checks.CheckRun:
    return coverage_checks.run_checks(slip, seed)


def num(x) -> str:
    """Tiny gaps in scientific notation; None / non-finite read 'undefined' via fmt()."""
    if x is None or not math.isfinite(x) or x == 0 or abs(x) >= 1e-3:
        return fmt(x, 4)
    return f"{x:.1e}"


def names(kind: str, codes) -> str:
    return ", ".join(t(f"validation.{kind}.{code}") for code in codes)


def count_input(column, label: str, low: int, high: int, default: int, key: str) -> int:
    """An integer input carried in the URL as ?key=value."""
    return column.number_input(t(f"validation.{label}"), low, high, default, key=key, bind="query-params")


def matrix_table(matrix: coverage.CoverageMatrix, name: str, missing: str = "not_run") -> None:
    """One row per scenario, one column per comparison, each cell its status and gaps."""

    def cell(row: str, column: str) -> str:
        c = matrix.cells[(row, column)]
        status = missing if c.status == "not_run" else c.status
        return t(f"validation.status.{status}", diff=num(c.correct_diff), slip=num(c.slip_diff))

    rows = [{"row": t(f"validation.row.{r}"), **{c: cell(r, c) for c in matrix.columns}} for r in matrix.rows]
    labels = {"row": t("validation.matrix.row")} | {c: t(f"validation.column.{c}") for c in matrix.columns}
    config = {c: text_column(label) for c, label in labels.items()}
    data = pd.DataFrame(coverage_rows(matrix, missing))  # one record per cell, numbers as numbers
    downloads.table(pd.DataFrame(rows), name, data=data, hide_index=True, column_config=config, key=name)


header("validation")
st.markdown(t("validation.method"))

st.subheader(t("validation.matrix.heading"))
st.markdown(t("validation.matrix.body"))
c = st.columns(2)
label, slips = t("validation.matrix.slip"), coverage_checks.SLIPS
slip = deeplink.choice(
    c[0].selectbox, label, slips, key="val_slip", default=slips[0], format_func=lambda s: names("slip", [s])
)
seed = count_input(c[1], "matrix.seed", 0, 10_000, 0, "val_seed")
with guard():
    run = checks(slip, seed)
    matrix = coverage.coverage_matrix(run.evidence)
    matrix_table(matrix, "coverage-matrix")
    st.caption(t("validation.matrix.legend"))
    if matrix.broken:
        st.error(
            t("validation.matrix.broken", cells=names("row", dict.fromkeys(r for r, _ in matrix.broken)))
        )
    if matrix.blind_rows:
        st.warning(t("validation.matrix.blind", rows=names("row", matrix.blind_rows)), icon=":material/visibility_off:")  # fmt: skip
    if matrix.uncovered_columns:
        st.error(t("validation.matrix.uncovered", columns=names("column", matrix.uncovered_columns)))
    elif not matrix.broken:
        st.success(t("validation.matrix.covered"))
    with st.expander(t("validation.details.heading")):
        raw = pd.DataFrame(run.details).drop(columns=["replicas", "accum_steps"])
        raw["row"], raw["counts"] = [names("row", [r]) for r in raw["row"]], raw["counts"].astype(str)
        figures = ("reference_loss", "slip_loss", "reference_norm")  # text on the page, data below
        details = raw.assign(**{c: [num(x) for x in raw[c]] for c in figures})
        config = {c: text_column(t(f"validation.details.{c}")) for c in details.columns}
        kwargs = {"hide_index": True, "column_config": config, "key": "val_details"}
        downloads.table(details, "coverage-scenarios", data=raw, **kwargs)

st.subheader(t("validation.torchrun.heading"))
st.markdown(t("validation.torchrun.body"))
if st.button(t("validation.torchrun.button"), key="val_torchrun", icon=":material/play_arrow:"):
    st.session_state[TORCHRUN_KEY] = True
evidence, result = (), None
if st.session_state.get(TORCHRUN_KEY):
    from runners import transformer  # on demand: rendering the page never starts a run
    from ui.runs import run_with_status

    with guard():
        params = {"labels": transformer.data.DEFAULT_LABELS, "world_size": 2}
        result = run_with_status(t("validation.torchrun.label"), transformer.run, **params)
        evidence = coverage.evidence_from_transformer(result.report if result and result.ok else None)
missing = "not_reported" if evidence else "not_run"
matrix_table(coverage.coverage_matrix(evidence, "torchrun"), "coverage-torchrun", missing)
st.caption(t("validation.torchrun.scope"))
if result is not None and result.ok:
    downloads.run_download(result, params, "transformer")

st.subheader(t("validation.sampler.heading"))
st.markdown(t("validation.sampler.body"))
c = st.columns(5)
size = count_input(c[0], "sampler.dataset_size", 1, 10_000, 10, "val_size")
world = count_input(c[1], "sampler.world_size", 1, 64, 4, "val_world")
sampler_seed = count_input(c[2], "sampler.seed", 0, 2**31 - 1, 0, "val_sampler_seed")
epoch_index = count_input(c[3], "sampler.epoch", 0, 1000, 0, "val_epoch")
drop_last = c[4].toggle(t("validation.sampler.drop_last"), key="val_drop_last", bind="query-params")
with guard():
    e = sampler.sampler_epoch(size, world, sampler_seed, epoch_index, drop_last)  # ~50 ms at most: no cache
    question, why = t("validation.sampler.exercise", n=size, p=world), t("validation.sampler.exercise_why")
    scenario = (size, world, sampler_seed, epoch_index, drop_last)
    if not predict_number("val_ex", question, e.repeated_entries, why, scenario=scenario, tolerance=0):
        st.stop()  # the sampler's figures are the last section: only they (and the code) wait
    m = st.columns(4)
    m[0].metric(t("validation.sampler.dataset_tokens"), e.dataset_tokens, help=t("validation.sampler.dataset_help"))  # fmt: skip
    m[1].metric(t("validation.sampler.consumed_tokens"), e.consumed_tokens, delta=e.extra_tokens, delta_color="off")  # fmt: skip
    m[2].metric(t("validation.sampler.repeated"), e.repeated_entries)
    m[3].metric(t("validation.sampler.dropped"), e.dropped_samples)
    ranks = pd.DataFrame([{**r, "indices": list(r["indices"])} for r in e.rows])
    number = st.column_config.NumberColumn
    config = {c: number(t(f"validation.sampler.{c}")) for c in ("rank", "samples", "repeats", "tokens")} | {
        "token_share": number(t("validation.sampler.token_share"), format="percent"),
        "indices": st.column_config.ListColumn(t("validation.sampler.indices")),
    }
    downloads.table(ranks, "sampler-ranks", hide_index=True, column_config=config, key="val_ranks")
    bars = alt.Chart(ranks).mark_bar().encode(
        x=alt.X("rank:O", title=t("validation.sampler.rank")),
        y=alt.Y("tokens:Q", title=t("validation.sampler.tokens")),
        tooltip=[alt.Tooltip(f"{c}:Q") for c in ("rank", "samples", "repeats", "tokens")],
    )  # fmt: skip
    share = alt.Chart(pd.DataFrame({"y": [e.even_share_tokens]})).mark_rule(strokeDash=[4, 4]).encode(y=alt.Y("y:Q"))  # fmt: skip
    st.altair_chart(bars + share, key="val_chart")
    seen = ", ".join(t("validation.sampler.seen_item", times=k, samples=n) for k, n in e.times_seen.items())
    st.markdown(t("validation.sampler.measured", per_rank=e.rows[0]["samples"], seen=seen, extra=e.extra_tokens))  # fmt: skip

show_code(
    coverage_checks.run_checks,
    coverage.coverage_matrix,
    coverage.evidence_from_transformer,
    sampler.sampler_epoch,
)
