"""Page 10's real run: a bundled run-mode trainer (examples/trainers/run_*.py) through the
trainer check's run mode on two Gloo processes, two epochs, and what it measured - the
parameter gap to the one-process run at every update (log scale; an update that has no gap is
drawn as what it is, never as 0), the learning rate per update, and the check's verdict and
diagnoses in the reader's language.

The page only ever hands the run a path from the examples' index, by a fixed option code
(LOOPS); every diagnosis is worded as the check page words it (ui.trainer_diagnoses).

    python -c "from pclab.ui.across_run import params; print(params('divide_by_k'))"
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd
import streamlit as st

from pclab.core import windows
from pclab.experiments.trainer_check import examples
from pclab.experiments.trainer_check.run_codes import LOOP_CODE_NAMES
from pclab.ui import downloads, i18n
from pclab.ui import trainer_diagnoses as check_diagnoses
from pclab.ui.across_views import share
from pclab.ui.figures import fmt
from pclab.ui.language import lang, t
from pclab.ui.trainer_views import UNDEFINED_INK

LOOPS = {  # option code -> its bundled example's stem
    "correct": "run_correct",
    "divide_by_k": "run_divide_by_k",
    "tail_never_steps": "run_tail_never_steps",
    "scheduler_per_microstep": "run_scheduler_per_microstep",
}
WORLD_SIZE, ACCUM_STEPS = 2, 2  # two Gloo processes; 2 epochs of 2K + 1 = 5 microbatches
RUN_CODES = LOOP_CODE_NAMES  # the run-loop codes (run_codes.py)
TOLERANCE = 1e-10  # the check's own, drawn as a rule
STATUS_SHAPES = {"measured": "circle", "zero": "diamond", "no_step": "cross", "skipped": "square"}


def params(loop: str) -> dict:
    """The run's parameters for a loop's option code (ValueError for any other)."""
    if loop not in LOOPS:
        raise ValueError(f"loop={loop!r} is invalid: expected one of {', '.join(LOOPS)}")
    path = examples.path_of(LOOPS[loop])
    return {"trainer": str(path), "world_size": WORLD_SIZE, "accum": ACCUM_STEPS}


def scenario_name(name: str) -> str:
    """A scenario's name in the reader's words (the check page's)."""
    key = f"check.scenario.{name}"
    return t(key) if key in i18n.catalogue(lang()) else name


def diagnosis(d: dict, check: dict) -> str:
    """One diagnosis in the reader's language, as the check page says it (one wording per
    code: trainer_diagnoses; English is the report's own message)."""
    return check_diagnoses.text(d, check)


def _status(u: dict) -> str:
    if u["skipped"]:
        return "skipped"
    gap = u.get("max_abs_diff")
    if gap is None or not math.isfinite(gap):
        return "no_step"
    return "zero" if gap == 0 else "measured"


def update_label(u: dict) -> str:
    return t("across.run.update_label", epoch=u["epoch"], window=u["window"])


def gap_rows(check: dict) -> list[dict]:
    """One row per (scenario, update): its gap where it has one, and what it is otherwise."""
    rows = []
    for s in check["scenarios"]:
        for i, u in enumerate(s["updates"]):
            status = _status(u)
            rows.append(
                {"scenario": scenario_name(s["name"]), "order": i, "update": update_label(u)}
                | {"gap": u.get("max_abs_diff") if status == "measured" else None}
                | {"status": t(f"across.run.status.{status}"), "code": status}
            )
    return rows


def gap_chart(check: dict) -> None:
    """max |Δ| against the one-process run per update, log scale, one line per scenario,
    broken where an update has no gap: that update sits on the floor as a grey mark named by
    its status (no step taken, skipped at N = 0, exactly 0)."""
    frame = pd.DataFrame(gap_rows(check))
    gaps = [g for g in frame["gap"] if g is not None and g > 0]
    low = 10 ** math.floor(math.log10(min([*gaps, TOLERANCE]))) / 10
    high = 10 ** math.ceil(math.log10(max([*gaps, TOLERANCE]))) * 10
    frame["floor"] = low
    order = list(dict.fromkeys(frame["update"]))
    x = alt.X("update:N", sort=order, title=None, axis=alt.Axis(labelAngle=0))
    scale = alt.Scale(type="log", domain=[low, high])
    axis = alt.Axis(format="~e", title=t("across.run.axis_gap"))
    tip: list = ["scenario:N", "update:N", "status:N", alt.Tooltip("gap:Q", format=".2e")]
    base = alt.Chart(frame).encode(x=x, tooltip=tip)
    legend = alt.Legend(orient="bottom", title=None, labelLimit=0, columns=1)
    lines = base.mark_line(point=True, invalid="break-paths-filter-domains").encode(
        y=alt.Y("gap:Q", scale=scale, axis=axis), color=alt.Color("scenario:N", legend=legend)
    )
    present = [c for c in STATUS_SHAPES if c != "measured" and c in set(frame["code"])]
    shapes = alt.Shape(
        "status:N",
        legend=alt.Legend(orient="bottom", title=None, labelLimit=0),
        scale=alt.Scale(
            domain=[t(f"across.run.status.{c}") for c in present],
            range=[STATUS_SHAPES[c] for c in present],
        ),
    )
    missing = base.transform_filter(alt.datum.code != "measured").mark_point(
        size=90, color=UNDEFINED_INK, filled=True
    )
    missing = missing.encode(y=alt.Y("floor:Q", scale=scale), shape=shapes)
    rule = pd.DataFrame({"tolerance": [TOLERANCE]})
    tolerance = (
        alt.Chart(rule).mark_rule(strokeDash=[5, 4], color="#888888").encode(y="tolerance:Q")
    )
    layers = [lines, tolerance, *([missing] if present else [])]
    chart = alt.layer(*layers).resolve_scale(color="independent", shape="independent")
    st.altair_chart(chart.properties(height=360))


def lr_chart(check: dict, scenario: str = "uneven") -> None:
    """The rate the loop's updates used against the intended schedule, per update."""
    s = next((s for s in check["scenarios"] if s["name"] == scenario), None)
    if s is None:
        return
    rows = []
    for u in s["updates"]:
        for series in ("lr_yours", "lr_intended"):
            if u.get(series) is not None:
                rows.append(
                    {"update": update_label(u), "rate": u[series]}
                    | {"series": t(f"across.run.{series}")}
                )
    if not rows:
        return
    order = [update_label(u) for u in s["updates"]]
    legend = alt.Legend(orient="bottom", title=None, labelLimit=0)
    chart = (
        alt.Chart(pd.DataFrame(rows))
        .mark_line(point=True, strokeWidth=2.5)
        .encode(
            x=alt.X("update:N", sort=order, title=None, axis=alt.Axis(labelAngle=0)),
            y=alt.Y("rate:Q", title=t("across.run.axis_rate")),
            color=alt.Color("series:N", legend=legend),
            strokeDash=alt.StrokeDash("series:N", legend=None),
            tooltip=["series:N", "update:N", alt.Tooltip("rate:Q", format=".4f")],
        )
    )
    st.altair_chart(chart.properties(height=320))


def _scheme(code: str | None) -> str:
    if code is None:
        return "—"
    key = f"schemes.{code}"
    return t(key) if key in i18n.catalogue(lang()) else t("check.results.other")


def updates_table(check: dict) -> None:
    """Every update of every scenario, as measured (undefined where there is no number)."""
    rows = []
    for s in check["scenarios"]:
        for u in s["updates"]:
            status = _status(u)
            gap = u.get("max_abs_diff")
            rows.append(
                {
                    "scenario": scenario_name(s["name"]),
                    "update": update_label(u),
                    "labels": u["num_valid_labels"],
                    "steps": u["optimizer_steps"],
                    "gap": f"{gap:.1e}"
                    if status == "measured"
                    else t(f"across.run.status.{status}"),
                    "lr_yours": fmt(u.get("lr_yours")),
                    "lr_intended": fmt(u.get("lr_intended")),
                    "scheme": _scheme(u.get("scheme")),
                }
            )
    config = {c: t(f"across.run.col_{c}") for c in rows[0]} if rows else {}
    downloads.table(pd.DataFrame(rows), "run-updates", static=True, column_config=config)


def banner(check: dict) -> None:
    """The verdict (a success only for the same update), then the diagnoses, translated."""
    failed = [scenario_name(s["name"]) for s in check["scenarios"] if s["verdict"] == "different"]
    status = check["status"]
    if status == "same_update":
        st.success(t("across.run.passed"), icon=":material/check:")
    elif status == "different":
        where = i18n.join(lang(), failed)
        st.error(t("across.run.failed", scenarios=where), icon=":material/error:")
    else:
        st.warning(t("across.run.no_evidence"), icon=":material/help:")
    lines = explained(check)
    if lines:
        st.markdown(t("check.results.why"))
        st.markdown("\n".join(f"- {line}" for line in lines))


def explained(check: dict) -> list[str]:
    """The diagnoses, translated, in the report's order, each once."""
    return list(dict.fromkeys(diagnosis(d, check) for d in check.get("diagnoses", ()) if d))


def predicted_tail(check: dict) -> float | None:
    """core.windows' prediction for a ÷K loop's tail on the run's uneven first epoch."""
    s = next((s for s in check["scenarios"] if s["name"] == "uneven"), None)
    if s is None:
        return None
    first_epoch = [rank[0] for rank in s["counts"]]
    return windows.epoch_updates(first_epoch, check["accum_steps"], "accum_steps")[-1].ratio


def results(report: dict, loop: str) -> None:
    """Everything a finished run shows."""
    check = report["checks"][0]
    banner(check)
    if loop == "divide_by_k":
        scaled = [d["scale"] for d in check["diagnoses"] if d.get("code") == "tail_window_scaled"]
        measured = share(round(scaled[0], 4)) if scaled else t("common.undefined")
        st.markdown(
            t("across.run.tail_check", predicted=share(predicted_tail(check)), measured=measured)
        )
    st.markdown(f"**{t('across.run.gap_title')}**")
    st.caption(t("across.run.gap_caption"))
    gap_chart(check)
    st.markdown(f"**{t('across.run.lr_title')}**")
    lr_chart(check)
    with st.expander(t("across.run.table"), icon=":material/table:"):
        updates_table(check)
