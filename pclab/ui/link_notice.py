"""The notice that names each value of a shared link the page could not use (garbled, out of
range, empty, not an option) and what it shows instead.

The page's header reserves the notice's place under the title (`reserve`); at the end of the
run (app.py), or before a workshop gate stops the page (ui.exercise), `link_notice` compares
the link with what the widgets now hold (ui.deeplink.unusable) and fills that place.
"""

from __future__ import annotations

import threading

import streamlit as st

from pclab.ui import deeplink, i18n
from pclab.ui.figures import fmt
from pclab.ui.language import lang, t
from pclab.ui.plain_text import plain


class _ThisRun(threading.local):
    """The place reserved for the notice in this script run, and whether the run is a
    visit's first. A session's script runs happen one at a time on its script thread; the
    class values are what a run that reserved nothing reads (no AttributeError)."""

    slot: object | None = None  # a st.empty() placeholder
    first_of_visit: bool = False


_RUN = _ThisRun()


def _cut(raw: str, limit: int = 40) -> str:
    return raw if len(raw) <= limit else f"{raw[:limit]}…"


def _show(found: list[tuple[str, str, object]], slot) -> None:
    def used(value: object) -> str:
        if value is None:
            return t("common.link.preset")
        if isinstance(value, bool):
            return t("common.yes") if value else t("common.no")
        return fmt(value) if isinstance(value, float) else str(value)

    items = i18n.join(
        lang(),
        [f"{plain(key)}={plain(_cut(raw))} → {plain(used(value))}" for key, raw, value in found],
        "clauses",
    )
    slot.warning(t("common.link.unusable", items=items), icon=":material/link_off:")


def reserve(first_of_visit: bool) -> None:
    """Put an empty place for the notice here (under the title) and remember, for this run,
    whether it is the visit's first. On a later run of the visit, fill it at once with what
    the first run found (kept in the session while the reader stays on the page)."""
    _RUN.slot, _RUN.first_of_visit = st.empty(), first_of_visit
    if not first_of_visit and (found := st.session_state.get(deeplink.FOUND_KEY)):
        _show(found, _RUN.slot)


def link_notice() -> None:
    """After the page's widgets (at the end of the run, or before a workshop gate stops it):
    on a visit's first run, name each value of the link the page could not use, in the
    place `reserve` kept. It takes that place: a run that reserved none (no header), or a
    second call in the same run, shows nothing."""
    slot, first_of_visit = _RUN.slot, _RUN.first_of_visit
    _RUN.slot, _RUN.first_of_visit = None, False
    if slot is None or not first_of_visit:  # later runs show what the first found
        return
    if found := deeplink.unusable():
        _show(found, slot)
