"""Page 10's figures from core: the epoch's windows and tail as a grid, each window's weight
sum under the three loops against the single-process run, the tail's k'/K, and the
learning rate per update under the intended schedule and each mistake (core.windows,
core.schedules). Nothing here computes a figure: it draws what core returned.

    python -c "from pclab.ui import across_views; print(across_views.LOOP_COLOURS)"
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from pclab.core import schedules, windows
from pclab.ui import downloads
from pclab.ui.figures import fmt
from pclab.ui.language import t
from pclab.ui.rank_table import rank_label
from pclab.ui.trainer_views import UNDEFINED_INK

# Mid-tone fills with dark ink: a cell's number reads in the light and the dark theme alike.
WINDOW_FILLS = ("#9ecae9", "#c7e9c0")  # full windows, alternating
TAIL_FILL = "#fdae6b"
INK = "#1b1b1b"
LOOP_COLOURS = {"global_tokens": "#2f7d32", "window_count": "#1f5fa8", "accum_steps": "#c0392b"}
SCHEDULE_DASH = {"intended": [], "per_microstep": [6, 3], "prepared": [2, 2]}
SCHEDULE_DASH |= {"short": [8, 3, 2, 3], "skip_advances": [4, 4]}


def share(value: float | None) -> str:
    """A weight sum or a ratio: unsigned (it is never negative), "undefined" for None."""
    return fmt(value).removeprefix("+")


def window_name(update: windows.WindowUpdate) -> str:
    w = update.window
    key = "across.windows.tail_name" if w.is_tail else "across.windows.window_name"
    return t(key, index=w.index)


def windows_grid(counts: tuple[tuple[int, ...], ...], accum_steps: int) -> None:
    """Every rank's microbatches, coloured by the window they fall in, the tail apart."""
    updates = windows.epoch_updates(counts, accum_steps, windows.CORRECT_LOOP)
    rows = []
    for u in updates:
        w = u.window
        fill = TAIL_FILL if w.is_tail else WINDOW_FILLS[w.index % 2]
        for r, row in enumerate(counts):
            for j in range(w.start, w.start + w.microsteps):
                rows.append(
                    {"rank": rank_label(r), "m": j, "n": row[j], "window": window_name(u)}
                    | {"fill": fill}
                )
    frame = pd.DataFrame(rows)
    names = list(dict.fromkeys(frame["window"]))
    fills = list(dict.fromkeys(frame["fill"]))
    base = alt.Chart(frame).encode(
        x=alt.X("m:O", title=t("across.windows.axis_microbatch"), axis=alt.Axis(labelAngle=0)),
        y=alt.Y("rank:N", title=None),
        tooltip=[alt.Tooltip("window:N", title=t("across.windows.axis_window"))],
    )
    legend = alt.Legend(orient="bottom", title=None, labelLimit=0)
    cells = base.mark_rect(stroke="#555555", strokeWidth=1).encode(
        color=alt.Color("window:N", scale=alt.Scale(domain=names, range=fills), legend=legend)
    )
    text = base.mark_text(fontSize=15, color=INK).encode(text="n:Q")
    # The height holds the axis, its title and the legend below too (autosize "fit").
    st.altair_chart((cells + text).properties(height=48 * len(counts) + 130))


def weight_rows(counts, accum_steps: int) -> list[dict]:
    """One row per (window, loop): the loop's weight sum, None where it is undefined."""
    rows: list[dict] = []
    for loop in windows.LOOPS:
        for u in windows.epoch_updates(counts, accum_steps, loop):
            rows.append(
                {
                    "window": window_name(u),
                    "loop": t(f"across.loops.{loop}"),
                    "code": loop,
                    "weight_sum": u.weight_sum,
                    "correct": u.correct_weight_sum,
                }
            )
    return rows


def weights_chart(counts, accum_steps: int) -> None:
    """Each window's weight sum under each loop, beside the single-process run's 1."""
    frame = pd.DataFrame(weight_rows(counts, accum_steps))
    loops = [t(f"across.loops.{c}") for c in windows.LOOPS]
    colours = [LOOP_COLOURS[c] for c in windows.LOOPS]
    frame["shown"] = frame["weight_sum"].map(share)
    frame["undefined"] = frame["weight_sum"].isna()
    frame["at"] = frame["weight_sum"].fillna(0.06)  # where the word "undefined" sits
    base = alt.Chart(frame).encode(
        x=alt.X("window:N", sort=None, title=None, axis=alt.Axis(labelAngle=0, labelLimit=0)),
        xOffset=alt.XOffset("loop:N", sort=loops),
        tooltip=[alt.Tooltip("loop:N"), alt.Tooltip("shown:N", title=t("across.weights.axis"))],
    )
    colour = alt.Color(
        "loop:N",
        scale=alt.Scale(domain=loops, range=colours),
        legend=alt.Legend(orient="bottom", title=None, labelLimit=0, columns=1),
    )
    y = alt.Y("at:Q", title=t("across.weights.axis"), scale=alt.Scale(domainMin=0))
    bars = base.transform_filter(~alt.datum.undefined).mark_bar().encode(y=y, color=colour)
    words = base.transform_filter(alt.datum.undefined).mark_text(
        angle=270, align="left", color=UNDEFINED_INK, fontSize=12
    )
    words = words.encode(y=y, text=alt.value(t("common.undefined")))
    one = pd.DataFrame({"y": [1.0], "label": [t("across.weights.reference")]})
    rule = alt.Chart(one).mark_rule(strokeDash=[6, 4], color="#888888").encode(y="y:Q")
    st.altair_chart((bars + words + rule).properties(height=340))


def weights_table(counts, accum_steps: int) -> None:
    """The same figures as a table: one row per window, one column per loop."""
    per_loop = {loop: windows.epoch_updates(counts, accum_steps, loop) for loop in windows.LOOPS}
    rows = []
    for i, u in enumerate(per_loop[windows.CORRECT_LOOP]):
        row = {
            "window": window_name(u),
            "microsteps": u.window.microsteps,
            "labels": u.window.num_valid_labels,
            "reference": share(u.correct_weight_sum)
            if u.correct_weight_sum
            else t("common.skipped"),
        }
        rows.append(row | {loop: share(per_loop[loop][i].weight_sum) for loop in windows.LOOPS})
    frame = pd.DataFrame(rows)
    config = {c: t(f"across.weights.col_{c}") for c in ("window", "microsteps", "labels")}
    config |= {"reference": t("across.weights.reference")}
    config |= {loop: t(f"across.loops.{loop}") for loop in windows.LOOPS}
    downloads.table(frame, "epoch-windows", static=True, column_config=config)


def tail_figure(counts, accum_steps: int) -> None:
    """The tail's update under ÷K against the correct one: a number and a bar."""
    last = windows.epoch_updates(counts, accum_steps, "accum_steps")[-1]
    if not last.window.is_tail:
        st.info(t("across.tail.none", accum=accum_steps), icon=":material/check:")
        return
    k = last.window.microsteps
    left, right = st.columns([1, 2], vertical_alignment="center")
    left.metric(t("across.tail.metric"), share(last.ratio))
    if last.ratio is None:
        right.caption(t("across.tail.undefined"))
        return
    right.progress(min(1.0, last.ratio), text=t("across.tail.bar", k=k, accum=accum_steps))


def schedule_used(world_size: int, mistake: str, updates: int, length: int) -> float:
    """How far along (in percent) a `length`-update schedule stands after `updates` updates
    when stepped by `mistake`: its scheduler step s_u over its length T (core.schedules)."""
    shape = schedules.RunShape(length, 1, 1, world_size)  # one epoch of `length` updates
    trajectory = schedules.lr_trajectory(shape, mistake)
    return 100 * trajectory.steps[updates] / trajectory.length


def schedule_rows(shape: schedules.RunShape, warmup: int) -> list[dict]:
    rows = []
    for mistake in schedules.MISTAKES:
        trajectory = schedules.lr_trajectory(shape, mistake, warmup)
        name = t(f"across.schedule.names.{mistake}")
        for u, (step, rate) in enumerate(zip(trajectory.steps, trajectory.rates)):
            rows.append({"update": u, "rate": rate, "step": step, "schedule": name})
    return rows


def schedule_chart(shape: schedules.RunShape, warmup: int) -> None:
    """The rate (÷ the base rate) each true update used, one line per way of stepping."""
    frame = pd.DataFrame(schedule_rows(shape, warmup))
    if frame.empty:
        st.info(t("across.schedule.no_update"), icon=":material/block:")
        return
    names = [t(f"across.schedule.names.{m}") for m in schedules.MISTAKES]
    dashes = [SCHEDULE_DASH[m] for m in schedules.MISTAKES]
    legend = alt.Legend(orient="bottom", title=None, labelLimit=0, columns=2)
    chart = (
        alt.Chart(frame)
        .mark_line(point=True, strokeWidth=2.5)
        .encode(
            x=alt.X(
                "update:Q", title=t("across.schedule.axis_update"), axis=alt.Axis(tickMinStep=1)
            ),
            y=alt.Y("rate:Q", title=t("across.schedule.axis_rate"), scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("schedule:N", sort=names, legend=legend),
            strokeDash=alt.StrokeDash("schedule:N", sort=names, scale=alt.Scale(range=dashes)),
            tooltip=["schedule:N", "update:Q", "step:Q", alt.Tooltip("rate:Q", format=".3f")],
        )
    )
    st.altair_chart(chart.properties(height=440))


def ends_table(shape: schedules.RunShape, warmup: int) -> None:
    """Where each schedule ends: its length, its step and rate at the last update, and the
    update from which its rate is 0."""
    rows = []
    for mistake in schedules.MISTAKES:
        tr = schedules.lr_trajectory(shape, mistake, warmup)
        ends = t("across.schedule.never") if tr.ends_at is None else str(tr.ends_at)
        rows.append(
            {
                "schedule": t(f"across.schedule.names.{mistake}"),
                "length": tr.length,
                "last_step": tr.steps[-1] if tr.steps else None,
                "last_rate": share(tr.rates[-1]) if tr.rates else t("common.undefined"),
                "ends_at": ends,
            }
        )
    config = {c: t(f"across.schedule.col_{c}") for c in rows[0]}
    downloads.table(pd.DataFrame(rows), "schedules", static=True, column_config=config)
