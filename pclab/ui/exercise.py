""" "Predict, then reveal": the learner commits to a figure before the page shows it.

Each page asks one question about its current scenario; the answer is the figure core
computed for that scenario, so the exercise follows whatever the learner (or the
instructor's deep link) set up. In workshop mode (sidebar, `?workshop=true`) the page
hides its figures until the answer for *this* scenario has been revealed; change the
scenario and they hide again. Numbers are judged with a tolerance relative to their
size; decisions exactly; an undefined figure expects no number at all. A prediction is
graded as it stood when Reveal was pressed, and a new scenario starts with an empty one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from pclab.rooms.tally import WITHIN, is_right
from pclab.ui import room_view
from pclab.ui.figures import fmt
from pclab.ui.language import t
from pclab.ui.link_notice import link_notice
from pclab.ui.page_header import WORKSHOP_KEY


def _forget_old_guess(key: str, answer: object, scenario: object) -> str:
    """Clear the guess when the scenario changed since the last run: a prediction belongs to
    the scenario it was made for. Runs before the guess widget exists. Returns the marker
    of the current scenario."""
    current, seen = repr((answer, scenario)), f"{key}_scenario"
    if st.session_state.get(seen, current) != current:
        st.session_state[f"{key}_guess"] = None
    st.session_state[seen] = current
    return current


def _revealed(key: str, current: str, guess: object) -> tuple[bool, object]:
    """(revealed, the guess that was revealed): True once the answer for this scenario has
    been revealed (until the scenario changes). A guess is graded as it stood when Reveal
    was pressed, so changing it afterwards needs another press."""
    marker, graded = f"{key}_revealed_for", f"{key}_revealed_guess"
    if st.session_state.get(f"{key}_reveal"):
        st.session_state[marker], st.session_state[graded] = current, guess
    return st.session_state.get(marker) == current, st.session_state.get(graded)


def _layout(question: str):
    box = st.container(border=True)
    box.markdown(f"**:material/psychology_alt: {t('exercise.title')}** — {question}")
    left, right = box.columns([3, 1], vertical_alignment="bottom")
    return box, left, right


def _reveal_button(column, key: str) -> None:
    """Reveal; in a live room only the presenter's reveals (for everyone)."""
    waits = room_view.waits_for_presenter()
    help_text = t("room.reveal_by_presenter") if waits else None
    column.button(
        t("exercise.reveal"), key=f"{key}_reveal", width="stretch", disabled=waits, help=help_text
    )


def _verdict(box, revealed: bool, explain: str) -> bool:
    if revealed:
        box.caption(explain)
    elif st.session_state.get(WORKSHOP_KEY):
        box.caption(t("exercise.hidden"))
        link_notice()  # the page stops here: check the link's values now
    return revealed or not st.session_state.get(WORKSHOP_KEY)


def predict_number(
    key: str,
    question: str,
    answer: float | None,
    explain: str,
    *,
    scenario: object = None,
    tolerance: float = WITHIN,
    show: Callable[[float | None], str] = fmt,
) -> bool:
    """Ask for a number; returns True when the page may show its figures.

    `scenario`: the page's inputs, so changing any of them hides the figures again.
    `tolerance`: how close is right, relative to the answer (0: exactly), as the live room
    counts it too: tally.is_right decides for both.
    `show`: how the answer is written, here and in the room (figures.magnitude for an
    absolute value: "0.2", not "+0.2"); the gap to a guess keeps its sign.
    """
    current = _forget_old_guess(key, answer, scenario)
    closed = room_view.before_guess(key, current)  # in a live room: revealed for the room
    box, left, right = _layout(question)
    guess = left.number_input(
        t("exercise.your_prediction"),
        value=None,
        format="%g",  # -0.5 reads -0.5, not -0.500000; six significant digits at most
        key=f"{key}_guess",
        disabled=closed,
    )
    _reveal_button(right, key)
    revealed, graded = _revealed(key, current, guess)
    room_view.follow(
        box, key, current, guess, answer, closed=closed, tolerance=tolerance, show=show
    )
    if revealed and graded != guess:
        box.info(t("exercise.regrade", answer=show(answer)))
    elif revealed:
        if answer is None:
            (box.success if guess is None else box.warning)(t("exercise.undefined_answer"))
        elif guess is None:
            box.info(t("exercise.no_guess", answer=show(answer)))
        elif is_right(guess, answer, tolerance):
            box.success(t("exercise.right", answer=show(answer)))
        else:
            box.warning(t("exercise.gap", answer=show(answer), gap=fmt(guess - answer)))
    return _verdict(box, revealed, explain)


def predict_choice(
    key: str,
    question: str,
    options: Sequence[str],
    answer: str,
    explain: str,
    format_func: Callable[[str], str],
    *,
    scenario: object = None,
) -> bool:
    """Ask for a decision (skip or step, pass or fail); returns True when figures may show."""
    current = _forget_old_guess(key, answer, scenario)
    closed = room_view.before_guess(key, current)  # in a live room: revealed for the room
    box, left, right = _layout(question)
    guess = left.radio(
        t("exercise.your_prediction"),
        options,
        index=None,
        format_func=format_func,
        key=f"{key}_guess",
        horizontal=True,
        disabled=closed,
    )
    _reveal_button(right, key)
    revealed, graded = _revealed(key, current, guess)
    labels = {option: format_func(option) for option in options}
    room_view.follow(box, key, current, guess, answer, closed=closed, labels=labels)
    if revealed and graded != guess:
        box.info(t("exercise.regrade", answer=format_func(answer)))
    elif revealed:
        if guess == answer:
            box.success(t("exercise.right", answer=format_func(answer)))
        else:
            box.warning(t("exercise.wrong_choice", answer=format_func(answer)))
    return _verdict(box, revealed, explain)
