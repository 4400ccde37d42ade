"""An exercise in a live room: a participant's prediction goes to the room's database, the
presenter sees the room's answers live, and the presenter's Reveal closes the exercise for
everyone (pclab.rooms.store).

The live parts are fragments that rerun on their own (`st.fragment(run_every=...)`): the
presenter's count and histogram every `REFRESH_S`, a participant's status every
`STATUS_S`; neither reruns the page's experiment. Nothing a participant sends is rendered
as markup: numbers are formatted by `fmt`, choices are the page's own option codes
(anything else is refused by the store), and the charts draw data, not text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import altair as alt
import pandas as pd
import streamlit as st

from pclab.rooms.rules import Refused
from pclab.rooms.tally import WITHIN, Tally
from pclab.ui.figures import fmt
from pclab.ui.language import t
from pclab.ui.room_panel import role as room_role
from pclab.ui.room_panel import room_store

REFRESH_S = 1.0  # the presenter's view: current within 2 s (p95 with load)
STATUS_S = 2.0  # a participant's status (closed yet?)
FONT = 16  # axis text read from the back of a room


def waits_for_presenter() -> bool:
    """A participant's Reveal is the presenter's: their own button is off."""
    current = room_role()
    return current is not None and current.participant


def before_guess(key: str, current: str) -> bool:
    """Before the guess widget: a participant coming back gets their recorded prediction
    (once per scenario and visit), and an exercise the presenter revealed is revealed here too.
    Returns whether it is closed for the room (False outside a room)."""
    role = room_role()
    if role is None:
        return False
    store, guess_key, seeded = room_store(), f"{key}_guess", f"{key}_room_seeded"
    # Once per scenario, and again when the page comes back (a page change drops the guess
    # widget's state): the seat's recorded prediction is the field's value.
    if role.secret and (
        st.session_state.get(seeded) != current or guess_key not in st.session_state
    ):
        st.session_state[seeded] = current
        if st.session_state.get(guess_key) is None:
            recorded = store.prediction(role.code, role.secret, key, current)
            if recorded is not None:
                st.session_state[guess_key] = recorded
    closed, _ = store.revealed(role.code, key, current)
    if closed and st.session_state.get(f"{key}_revealed_for") != current:
        st.session_state[f"{key}_revealed_for"] = current
        st.session_state[f"{key}_revealed_guess"] = st.session_state.get(guess_key)
    return closed


def follow(
    box,
    key: str,
    current: str,
    guess: float | str | None,
    answer: float | str | None,
    *,
    closed: bool,
    labels: dict[str, str] | None = None,
    tolerance: float = WITHIN,
    show: Callable[[float | None], str] = fmt,
) -> None:
    """After the widgets: record a participant's prediction (when it changed) and show their
    status; record the presenter's Reveal and show the room's answers, counted right by the
    exercise's `tolerance` (the rule its page grades with: tally.is_right), a number answer
    written as the page writes it (`show`)."""
    role = room_role()
    if role is None:
        return
    options = tuple(labels or ())
    if role.host_key:
        if st.session_state.get(f"{key}_reveal"):
            try:
                room_store().reveal(role.code, role.host_key, key, current, answer)
            except Refused as refused:  # the room expired since this run began
                box.warning(t(f"room.refused.{refused.reason}"), icon=":material/block:")
        with box:
            _presenter_live(role.code, key, current, options, labels or {}, tolerance, answer, show)
        return
    sent = f"{key}_room_sent"
    if not closed and role.secret and st.session_state.get(sent) != (current, guess):
        try:  # written with the seat's secret: only the browser holding the seat writes it
            room_store().predict(role.code, role.secret, key, current, guess, options=options)
            st.session_state[sent] = (current, guess)
        except Refused as refused:
            box.warning(t(f"room.refused.{refused.reason}"), icon=":material/block:")
    with box:
        _participant_live(role.code, key, current, closed, guess is not None)


@st.fragment(run_every=STATUS_S)
def _participant_live(code: str, key: str, scenario: str, closed: bool, answered: bool) -> None:
    revealed, _ = room_store().revealed(code, key, scenario)
    if revealed and not closed:
        st.rerun()  # the presenter revealed: the whole page shows the answer, closed
    if revealed:
        st.caption(f":material/lock: {t('room.closed')}")
    else:
        st.caption(f":material/groups: {t('room.recorded' if answered else 'room.waiting')}")


@st.fragment(run_every=REFRESH_S)
def _presenter_live(
    code: str,
    key: str,
    scenario: str,
    options: Sequence[str],
    labels: dict[str, str],
    tolerance: float,
    answer: float | str | None,
    show: Callable[[float | None], str] = fmt,
) -> None:
    """The room's count and spread; after Reveal how many were right, the answer said as
    the page says it (the page's own value: a count reads 140, not the database's 140.0)."""
    tally = room_store().tally(code, key, scenario, options=options, tolerance=tolerance)
    st.markdown(
        f"#### :material/co_present: "
        f"{t('room.answered', answered=tally.answered, participants=tally.participants)}"
    )
    if tally.answered:
        chart = _bars(tally, labels) if options else _histogram(tally)
        st.altair_chart(chart, width="stretch")
    if tally.revealed:
        shown = labels.get(answer, "") if isinstance(answer, str) else show(answer)
        said = "room.result_choice" if options else "room.result_number"
        if not options and tolerance == 0:
            said = "room.result_exact"  # a count: only the answer itself is right
        percent = f"{tolerance * 100:g}"
        text = t(said, right=tally.right, answered=tally.answered, answer=shown, within=percent)
        st.success(text, icon=":material/campaign:")


def _histogram(tally: Tally) -> alt.LayerChart | alt.Chart:
    """The numbers in up to 20 bins; after Reveal, the answer as a red line."""
    data = pd.DataFrame({"prediction": list(tally.numbers)})
    bars = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("prediction:Q", bin=alt.Bin(maxbins=20), title=t("room.axis_prediction")),
            y=alt.Y("count():Q", title=t("room.axis_count"), axis=alt.Axis(tickMinStep=1)),
        )
    )
    if isinstance(tally.answer, int | float):
        answer = pd.DataFrame({"answer": [float(tally.answer)]})
        bars = bars + alt.Chart(answer).mark_rule(color="#ff4b4b", strokeWidth=4).encode(
            x="answer:Q"
        )
    return _readable(bars)


def _bars(tally: Tally, labels: dict[str, str]) -> alt.Chart:
    """One bar per option, in the page's order; after Reveal the answer's bar stands out."""
    rows = [
        {"option": labels.get(o, o), "count": n, "answer": o == tally.answer}
        for o, n in tally.choices
    ]
    order = [labels.get(o, o) for o, _ in tally.choices]
    colour = alt.condition("datum.answer", alt.value("#ff4b4b"), alt.value("#7aa6d8"))
    chart = (
        alt.Chart(pd.DataFrame(rows))
        .mark_bar()
        .encode(
            y=alt.Y("option:N", sort=order, title=None, axis=alt.Axis(labelLimit=360)),
            x=alt.X("count:Q", title=t("room.axis_count"), axis=alt.Axis(tickMinStep=1)),
            color=colour,
        )
    )
    return _readable(chart)


def _readable(chart):
    return chart.properties(height=240).configure_axis(labelFontSize=FONT, titleFontSize=FONT)
