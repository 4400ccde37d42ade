"""The run mode's figures and tables on the "Check a trainer" page (ui/trainer_run.py draws
the rest): the strip of a scenario's updates (one cell per window: its verdict's colour and
the scheme its weights fit; a skipped window says "skipped", an undefined gap "undefined",
never a colour or a 0), the learning rate per update (the loop's against the intended
schedule's), a resume check's timeline (per kill point the run's updates, the kill and the
restart marked, and where the restarted run parts from the uninterrupted one), and the
tables of every update's numbers and of the kill points. Every figure is the report's.

    python -c "from pclab.ui import trainer_run_figures as f; print(f.STATE_COLOURS)"
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd
import streamlit as st

from pclab.ui import trainer_views as views
from pclab.ui.figures import fmt
from pclab.ui.language import t

SAME, DIFFERENT = "#2e7d32", "#c62828"
STATE_COLOURS = {"same_update": SAME, "different": DIFFERENT}  # no colour: skipped, undefined
PHASE_COLOURS = {"before_kill": "#8a8a8a", "same_run": SAME, "parts": DIFFERENT}
KILLED, RESUMED = "✕", "↻"
# Heights in px, axes and legend included (Streamlit fits the whole chart in them)
STRIP_HEIGHT, RATES_HEIGHT, ROW_HEIGHT = 120, 260, 34
TEXT_WIDTH = 680  # px the page's main column gives a chart (its default width)


def where(u: dict, accum: int) -> str:
    """An update's place in the run: "epoch·window", and "tail" for the epoch's shorter one."""
    place = f"{u['epoch']}·{u['window']}"
    return f"{place} {t('check.run_mode.cell.tail')}" if u["microsteps"] < accum else place


def state(u: dict, tolerance: float) -> str:
    """same_update / different against the one-process run; skipped (N = 0, the reference
    took no update) or undefined (no gap measured) otherwise: never a verdict by default."""
    if u["skipped"]:
        return "skipped"
    gap = u.get("max_abs_diff")
    if gap is None or not math.isfinite(gap):
        return "undefined"
    return "same_update" if u.get("first_divergence") is None and gap <= tolerance else "different"


def scheme_words(u: dict) -> str:
    if u["skipped"]:
        return t("common.skipped")
    scheme = u.get("scheme")
    if scheme is None:
        return t("common.undefined")
    if "fitting" in u:  # a contrastive loop's update: named by its pool (coupled_run_report)
        return t(f"coupled.scheme.{scheme}")
    return views.scheme_name(scheme) if scheme != "other" else t("check.results.other")


def size_column(s: dict) -> str:
    """What a window's size counts: labels, or a contrastive loop's items (its grid: sizes)."""
    return "items" if "sizes" in s else "labels"


def two_lines(words: str, width: int = 14) -> str:
    """A long name on two lines, broken at the space nearest its middle (the strip's cells
    hold about `width` characters a line; Chinese names are short)."""
    spaces = [i for i, c in enumerate(words) if c == " "]
    if len(words) <= width or not spaces:
        return words
    cut = min(spaces, key=lambda i: abs(i - len(words) / 2))
    return f"{words[:cut]}\n{words[cut + 1 :]}"


def strip_rows(s: dict, accum: int) -> list[dict]:
    """One row per window of the scenario's run, in run order."""
    rows = []
    for i, u in enumerate(s["updates"]):
        kind = state(u, s["tolerance"])
        coloured = kind in STATE_COLOURS
        rows.append(
            {
                "update": i,
                "where": where(u, accum),
                "state": kind,
                "verdict": t(f"check.verdict.{kind}") if coloured else None,
                "coloured": coloured,
                "text": scheme_words(u) if coloured else t(f"common.{kind}"),
                "cell": two_lines(scheme_words(u) if coloured else t(f"common.{kind}")),
                size_column(s): u["num_valid_labels"],
                "steps": u["optimizer_steps"],
            }
        )
    return rows


def _x(rows: list[dict]) -> alt.X:
    order = [r["where"] for r in rows]
    title = t("check.run_mode.column.where")
    gaps = alt.Scale(paddingInner=0.06)  # cells apart by the page's own background
    return alt.X("where:N", sort=order, title=title, axis=alt.Axis(labelAngle=0), scale=gaps)


def strip(rows: list[dict], key: str) -> None:
    """The scenario's updates as one row of cells: filled by verdict, or outlined and worded."""
    size = "items" if rows and "items" in rows[0] else "labels"
    say = {c: t(f"check.run_mode.column.{c}") for c in ("where", "verdict", size, "steps")}
    tip = [alt.Tooltip(f"{c}:N", title=say[c]) for c in say] + [
        alt.Tooltip("text:N", title=t("check.run_mode.column.scheme"))
    ]
    # one row of cells on a continuous y from 0 to 1 (Streamlit fits a chart to its height,
    # which shrinks a discrete band to nothing)
    frame = pd.DataFrame(rows).assign(bottom=0.0, top=1.0, middle=0.5)
    unit = alt.Scale(domain=[0, 1])
    base = alt.Chart(frame).encode(x=_x(rows), tooltip=tip)
    cell = {"y": alt.Y("bottom:Q", axis=None, scale=unit), "y2": alt.Y2("top:Q")}
    domain = [t(f"check.verdict.{k}") for k in STATE_COLOURS]
    colour = alt.Color(
        "verdict:N",
        scale=alt.Scale(domain=domain, range=list(STATE_COLOURS.values())),
        legend=None,  # the caption says what each colour means; a cell's tooltip its verdict
    )
    filled = base.mark_rect().encode(color=colour, **cell)
    filled = filled.transform_filter("datum.coloured")
    empty = base.mark_rect(fill=None, stroke=views.UNDEFINED_INK, strokeDash=[4, 3])
    empty = empty.encode(**cell).transform_filter("!datum.coloured")
    ink = alt.condition("datum.coloured", alt.value("white"), alt.value(views.UNDEFINED_INK))
    middle = alt.Y("middle:Q", axis=None, scale=unit)
    limit = max(56, TEXT_WIDTH // max(1, len(rows)) - 8)  # a long name ends in "…"; see tooltip
    words = base.mark_text(fontSize=10, limit=limit, lineBreak="\n")
    words = words.encode(text="cell:N", color=ink, y=middle)
    chart = alt.layer(filled, empty, words).properties(height=STRIP_HEIGHT)
    st.altair_chart(chart, key=key)


def rate_rows(s: dict, accum: int) -> list[dict]:
    """The rate of each update, yours and intended; a rate the report has not (a skipped
    window's intended one) is left out, never drawn as 0."""
    rows = []
    for i, u in enumerate(s["updates"]):
        for series in ("yours", "intended"):
            rate = u.get(f"lr_{series}")
            if rate is not None and math.isfinite(rate):
                label = t(f"check.run_mode.lr.{series}")
                rows.append({"update": i, "where": where(u, accum), "series": label, "lr": rate})
    return rows


def rates(rows: list[dict], order: list[str], key: str) -> None:
    """The learning rate per update: a line and points per series, on the strip's x axis."""
    series = [t(f"check.run_mode.lr.{s}") for s in ("yours", "intended")]
    x = alt.X("where:N", sort=order, title=t("check.run_mode.column.where"))
    x = x.axis(labelAngle=0)
    y = alt.Y("lr:Q", title=t("check.run_mode.lr.axis"), scale=alt.Scale(zero=False))
    y = y.axis(format=".3g", titleLimit=0)
    colour = alt.Color(
        "series:N",
        scale=alt.Scale(domain=series, range=["#b3530b", "#1f5fa8"]),
        title=None,
        legend=alt.Legend(orient="bottom"),
    )
    dash = alt.StrokeDash("series:N", sort=series, legend=None)
    tip = [alt.Tooltip("series:N"), alt.Tooltip("where:N"), alt.Tooltip("lr:Q", format=".6g")]
    base = alt.Chart(pd.DataFrame(rows)).encode(x=x, y=y, color=colour, tooltip=tip)
    chart = alt.layer(base.mark_line().encode(strokeDash=dash), base.mark_point(filled=True))
    st.altair_chart(chart.properties(height=RATES_HEIGHT), key=key)


def window_of(updates: list[dict], microbatch: int | None) -> int | None:
    """The window (an index into updates) holding the run's microbatch number `microbatch`
    (1-based, per rank, in run order: what a kill point and a restart are counted in)."""
    if microbatch is None:
        return None
    first = 0
    for i, u in enumerate(updates):
        if first < microbatch <= first + u["microsteps"]:
            return i
        first += u["microsteps"]
    return None


def _phase(i: int, entry: dict, killed: int | None, resumed: int | None) -> str:
    """before_kill (a point the run ended before is all before it), parts from the first
    update that parts from the uninterrupted run on, same_run, or not_run (no restart)."""
    parts = entry.get("first_divergence")
    if entry["verdict"] == "not_killed" or killed is None or i < killed:
        return "before_kill"
    if parts is not None and i >= parts:
        return "parts"
    return "same_run" if resumed is not None else "not_run"


def timeline_rows(entries: list[dict], updates: list[dict], accum: int) -> list[dict]:
    """One row per (kill point, update): its phase, and the kill and restart marks."""
    rows = []
    for entry in entries:
        killed = window_of(updates, entry.get("killed_at"))
        resumed = window_of(updates, entry.get("resumed_from"))
        for i, u in enumerate(updates):
            phase = _phase(i, entry, killed, resumed)
            marks = [m for m, at in ((KILLED, killed), (RESUMED, resumed)) if at == i]
            if entry["verdict"] == "not_killed":
                marks = []
            rows.append(
                {
                    "point": views.say("run_mode.point", entry["point"]),
                    "where": where(u, accum),
                    "phase": phase,
                    "state": t(f"check.run_mode.resume.state.{phase}"),
                    "coloured": phase in PHASE_COLOURS,
                    "marks": " ".join(marks),
                }
            )
    return rows


def timeline(rows: list[dict], key: str) -> None:
    """Per kill point a row of the run's updates: grey before the kill, then green the same as
    the uninterrupted run or red from the first update that parts from it; ✕ the kill, ↻ the
    restart."""
    order = list(dict.fromkeys(r["where"] for r in rows))
    points = list(dict.fromkeys(r["point"] for r in rows))
    point = t("check.run_mode.resume.point")
    tip = [alt.Tooltip("point:N", title=point), alt.Tooltip("where:N"), alt.Tooltip("state:N")]
    x = alt.X("where:N", sort=order, title=t("check.run_mode.column.where"))
    x = x.axis(labelAngle=0).scale(paddingInner=0.04)
    y = alt.Y("point:N", sort=points, title=point).scale(paddingInner=0.1)
    y = y.axis(labelLimit=240)  # a kill point's name whole
    base = alt.Chart(pd.DataFrame(rows)).encode(x=x, y=y, tooltip=tip)
    domain = [t(f"check.run_mode.resume.state.{p}") for p in PHASE_COLOURS]
    colour = alt.Color(
        "state:N",
        scale=alt.Scale(domain=domain, range=list(PHASE_COLOURS.values())),
        legend=None,  # the caption says what grey, green and red mean
    )
    cells = base.mark_rect().encode(color=colour).transform_filter("datum.coloured")
    empty = base.mark_rect(fill=None, stroke=views.UNDEFINED_INK, strokeDash=[4, 3])
    empty = empty.transform_filter("!datum.coloured")
    ink = alt.condition("datum.coloured", alt.value("white"), alt.value(views.UNDEFINED_INK))
    marks = base.mark_text(fontSize=15).encode(text="marks:N", color=ink)
    chart = alt.layer(cells, empty, marks).properties(height=ROW_HEIGHT * len(points) + 60)
    st.altair_chart(chart, key=key)


def update_frame(s: dict, accum: int) -> pd.DataFrame:
    """Every update's numbers as text in the reader's language (undefined reads "undefined")."""
    rows = []
    for i, (u, cell) in enumerate(zip(s["updates"], strip_rows(s, accum), strict=True)):
        leak = u.get("leak")
        rows.append(
            {
                "update": str(i),
                "where": cell["where"],
                "microsteps": str(u["microsteps"]),
                size_column(s): str(u["num_valid_labels"]),
                "verdict": cell["verdict"] or t(f"common.{cell['state']}"),
                "lr_yours": fmt(u.get("lr_yours")),
                "lr_intended": fmt(u.get("lr_intended")),
                "steps": str(u["optimizer_steps"]),
                "max_abs_diff": _sci(u.get("max_abs_diff")),
                "scheme": scheme_words(u),
                "leak": "—" if u["skipped"] else _sci(leak),
            }
        )
    return pd.DataFrame(rows)


def _sci(x: float | None) -> str:
    return fmt(None) if x is None else f"{x:.1e}"


def _at(updates: list[dict], microbatch: int | None, accum: int) -> str:
    i = window_of(updates, microbatch)
    if i is None:
        return "—"
    return t("check.run_mode.resume.at", microbatch=microbatch, where=where(updates[i], accum))


def _update_at(updates: list[dict], i: int | None, accum: int) -> str:
    return "—" if i is None or i >= len(updates) else where(updates[i], accum)


def resume_frame(entries: list[dict], updates: list[dict], accum: int) -> pd.DataFrame:
    """One row per kill point: where it was killed and resumed (microbatch and update), its
    verdict, the first update that parts from the uninterrupted run and from the one-process
    run, and the stable codes of what went wrong."""
    states = {"same_run": "same_run", "different": "parts", "not_killed": "not_killed"}
    states["no_evidence"] = "no_evidence"
    rows = [
        {
            "point": views.say("run_mode.point", e["point"]),
            "killed_at": _at(updates, e.get("killed_at"), accum),
            "resumed_from": _at(updates, e.get("resumed_from"), accum),
            "verdict": t(f"check.run_mode.resume.state.{states.get(e['verdict'], 'parts')}"),
            "first_divergence": _update_at(updates, e.get("first_divergence"), accum),
            "from_reference": _update_at(updates, e.get("first_divergence_from_reference"), accum),
            "codes": ", ".join(e.get("codes", ())) or "—",  # stable codes, as the JSON's
        }
        for e in entries
    ]
    return pd.DataFrame(rows)
