"""The top of every page, in one call (`header`): the link's visit opened, the sidebar's
switches, the title, the share button, the link notice's place and the lead."""

from __future__ import annotations

import streamlit as st

from pclab.ui import browser, deeplink, link_notice, room_panel, workshop
from pclab.ui.language import lang, language_switch, t
from pclab.ui.workshop import WORKSHOP_KEY as WORKSHOP_KEY  # the pages' name for it

_RANGES = ("between", "at_least", "at_most", "outside", "error", "press_enter")


def open_link_visit(section: str) -> bool:
    """Before any widget: keep the link's parameters on a visit's first run, and take out of
    the URL the values no widget can use (empty, or a number beyond float64), so each widget
    starts from its default and the notice names them. Returns whether this run is the
    visit's first."""
    first_of_visit = deeplink.start_visit(section)
    deeplink.drop_unreadable()
    return first_of_visit


def sidebar_switches(section: str, first_of_visit: bool) -> None:
    """The language switch, the workshop-mode toggle (both carried in the URL and kept for the
    visit, ui.workshop) and the live room's panel (ui.room_panel: a room link is taken before
    the toggle, which a participant's room holds on)."""
    language_switch()
    room_panel.arrive(section)
    current = room_panel.role()
    on = workshop.switch(
        t("exercise.workshop_mode"),
        first_of_visit=first_of_visit,
        held_on=current is not None and current.participant,
        held_help=t("room.workshop_held"),
    )
    room_panel.sidebar(t, on, lang(), section)


def header(section: str, *, share: bool = True) -> None:
    """Render the top of the page for `section` (catalogue prefix). In order, it:

    1. opens the link's visit (`open_link_visit`: session keys of ui.deeplink; the URL loses
       values no widget can hold);
    2. renders the sidebar's language switch, workshop toggle and live room
       (`sidebar_switches`);
    3. installs the browser helpers for number ranges and a stopped run
       (ui.browser.room_support);
    4. shows the title and, with `share`, the copy-link button;
    5. reserves the place of the link notice under the title (ui.link_notice.reserve),
       which the end of the run fills (ui.link_notice.link_notice);
    6. shows the lead paragraph.
    """
    first_of_visit = open_link_visit(section)
    sidebar_switches(section, first_of_visit)
    browser.room_support({k: t(f"common.range.{k}") for k in _RANGES}, t("runs.stopped"))
    st.title(t(f"{section}.title"))
    if share:
        texts = {k: t(f"common.share.{k}") for k in ("field", "copied_here", "copy_yourself")}
        browser.share_button(texts | {"label": t("common.copy_link"), "copied": t("common.copied")})
    link_notice.reserve(first_of_visit)
    st.markdown(t(f"{section}.lead"))
