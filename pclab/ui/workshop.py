"""Workshop mode: the sidebar toggle that hides each page's figures until Reveal, carried in
the URL as `?workshop=true` and kept for the whole visit, whichever way the reader moves.

Streamlit drops a page's query parameters on a page change (a sidebar click, Back to an entry
without them) and may drop a widget's state with them, so a toggle bound to the URL falls back
to off at the first sidebar click after a link turned it on (issue 45). The choice is kept in a
plain session key instead, as the language is (ui.language): a link's `?workshop=` sets it on
arrival, the toggle changes it, and every run writes it back into the URL. In a live room a
participant's toggle is held on: the figures stay hidden on every page until the presenter
reveals them.

    python -c "from pclab.ui.workshop import URL_NAME; print(URL_NAME)"
"""

from __future__ import annotations

import streamlit as st

WORKSHOP_KEY = "workshop"  # the toggle's key: True while the figures hide until Reveal
CHOSEN_KEY = "workshop_chosen"  # the choice, in a key no page change clears
URL_NAME = "workshop"


def _from_link() -> bool | None:
    """The link's `?workshop=`: True, False, or None when it says neither (absent, garbled:
    the page's link notice names a garbled value, ui.deeplink.unusable)."""
    raw = st.query_params.get(URL_NAME)
    return {"true": True, "false": False}.get((raw or "").strip().lower())


def switch(label: str, *, first_of_visit: bool, held_on: bool, held_help: str) -> bool:
    """The sidebar toggle; returns whether workshop mode is on.

    On a visit's first run the link's `?workshop=` decides (a shared link, Back); otherwise
    the session's choice, so a sidebar click or an in-page link keeps it. `held_on`: a live
    room's participant, whose toggle stays on (a caption under it says why).

    The widget's state is set on a visit's first run (a page change, where Streamlit may
    hand the toggle its default whatever the session held) and when the room holds it, never
    on a later run, where the reader's own click may be arriving with it.
    """
    value: bool | None = None
    if held_on:
        value = True
    elif first_of_visit:
        linked = _from_link()
        value = linked if linked is not None else st.session_state.get(CHOSEN_KEY)
    if value is None and WORKSHOP_KEY not in st.session_state:
        value = bool(st.session_state.get(CHOSEN_KEY, False))
    if value is not None:
        st.session_state[WORKSHOP_KEY] = bool(value)
    on = st.sidebar.toggle(label, key=WORKSHOP_KEY, disabled=held_on)
    if held_on:  # said under it: a help icon would be one more button named like "Reveal"
        st.sidebar.caption(held_help)
    st.session_state[CHOSEN_KEY] = on
    # Written only when it changes: each write is a browser-history entry (ui.deeplink).
    if on and st.query_params.get(URL_NAME) != "true":
        st.query_params[URL_NAME] = "true"
    elif not on and URL_NAME in st.query_params:
        st.query_params.pop(URL_NAME)
    return on


def carried() -> dict[str, str]:
    """The parameter a link to another page carries (ui.language.page_link): on, or nothing."""
    return {URL_NAME: "true"} if st.session_state.get(CHOSEN_KEY) else {}
