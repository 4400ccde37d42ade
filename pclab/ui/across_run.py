"""Page 10's real run: a bundled run-mode trainer (examples/trainers/run_*.py) through the
trainer check's run mode on two Gloo processes, two epochs, and what it measured - the
parameter gap to the one-process run at every update (log scale; an update that has no gap is
drawn as what it is, never as 0), the learning rate per update, and the check's verdict and
diagnoses in the reader's language. A loop that resumes from its own checkpoint is also killed
at each of the check's kill points and restarted for real; the reader picks one and sees its
timeline (the check page's figure): where the ranks were killed, where the restarted run took
it up, and the first update that parts from the uninterrupted run.

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
from pclab.ui import deeplink, downloads, i18n, vega
from pclab.ui import trainer_diagnoses as check_diagnoses
from pclab.ui import trainer_run_figures as run_figures
from pclab.ui.across_views import share
from pclab.ui.figures import fmt
from pclab.ui.language import lang, t
from pclab.ui.trainer_views import UNDEFINED_INK, say

LOOPS = {  # option code -> its bundled example's stem
    "correct": "run_correct",
    "divide_by_k": "run_divide_by_k",
    "tail_never_steps": "run_tail_never_steps",
    "scheduler_per_microstep": "run_scheduler_per_microstep",
    "resume_correct": "run_resume_correct",  # killed and restarted from its own checkpoint
    "resume_forgets_position": "run_resume_forgets_position",
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
    axis = alt.Axis(format=vega.LOG_TICKS, title=t("across.run.axis_gap"))
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
    elif status == "different" and failed:
        where = i18n.join(lang(), failed)
        st.error(t("across.run.failed", scenarios=where), icon=":material/error:")
    elif status == "different":  # every scenario the same run, uninterrupted: the restart not
        entries = check.get("resume") or ()
        parted = [say("run_mode.point", e["point"]) for e in entries if e["verdict"] == "different"]
        st.error(
            t("across.run.failed_restart", points=i18n.join(lang(), parted)),
            icon=":material/error:",
        )
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
    if check.get("resume"):
        restart(check)


def kill_points(check: dict) -> dict[str, dict]:
    """The report's kill points by their code, in the check's order."""
    return {entry["point"]: entry for entry in check.get("resume") or ()}


def first_red(entry: dict, updates: list[dict], accum: int) -> str:
    """The first update the timeline draws as parting from the uninterrupted run: the
    report's first divergence, or the kill's update if that came first (a restart that
    replays the data parts at its first replayed update, before the kill; the figure greys
    what was taken before the kill)."""
    parts = entry.get("first_divergence")
    killed = run_figures.window_of(updates, entry.get("killed_at"))
    if parts is None:
        return t("common.undefined")
    i = parts if killed is None else max(parts, killed)
    return run_figures.where(updates[i], accum) if i < len(updates) else t("common.undefined")


def restart(check: dict) -> None:
    """The run killed at the chosen point and restarted: its timeline and where it parts (the
    diagnoses, naming their kill points, are the banner's)."""
    st.markdown(f"**{t('across.restart.title')}**")
    st.caption(t("across.restart.caption"))
    points = kill_points(check)
    names = {code: say("run_mode.point", code) for code in points}
    chosen = deeplink.choice(
        st.segmented_control,
        t("across.restart.point"),
        tuple(points),
        key="acr_kill",
        default=next(iter(points)),
        format_func=names.__getitem__,
    )
    entry = points[chosen]
    uneven = next((s for s in check["scenarios"] if s["name"] == "uneven"), None)
    updates, accum = (uneven or {}).get("updates") or [], check["accum_steps"]
    if updates:
        # every kill point's row, as the check page draws them (one row alone draws too
        # thin to read); the chosen point is the one said below
        rows = run_figures.timeline_rows(list(points.values()), updates, accum)
        run_figures.timeline(rows, key="acr_restart_timeline")
    frame = run_figures.resume_frame([entry], updates, accum).iloc[0]
    if entry["verdict"] == "same_run":
        st.success(t("across.restart.same", point=names[chosen]), icon=":material/check:")
    elif entry["verdict"] in ("not_killed", "no_evidence"):
        st.info(t(f"check.run_mode.resume.state.{entry['verdict']}"), icon=":material/info:")
    else:
        where = t(
            "across.restart.parts", point=names[chosen], where=first_red(entry, updates, accum)
        )
        st.error(where, icon=":material/error:")
    st.markdown(t("across.restart.where", killed=frame["killed_at"], resumed=frame["resumed_from"]))
