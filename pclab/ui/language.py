"""The reader's language: the sidebar switch (carried in the URL as `?lang=en|zh`), the
language a run uses, and the catalogue text in it (`t`). Every page reads its words here.

    python -c "from pclab.ui.i18n import LANGUAGES; print(LANGUAGES)"
"""

from __future__ import annotations

import streamlit as st

from pclab.ui import deeplink, i18n, room_panel, workshop
from pclab.ui.pages import PAGES

LANG_KEY = "lang"
# The language last shown, in a plain session key: Streamlit clears a widget's key when the
# page changes (and a sidebar link drops the URL's ?lang=), so the radio alone forgets it.
CHOSEN_LANG_KEY = "lang_chosen"


def _preferred_language() -> str:
    """Before the switch has rendered: `?lang=` from the URL (a shared link), else the
    language this session already uses, else the browser locale."""
    for wanted in (st.query_params.get(LANG_KEY), st.session_state.get(CHOSEN_LANG_KEY)):
        if wanted in i18n.LANGUAGES:
            return wanted
    return i18n.language_from_locale(getattr(st.context, "locale", None))


def language_switch() -> str:
    """Sidebar language radio, carried in the URL as `?lang=en|zh`; remembers the choice in
    the session (CHOSEN_LANG_KEY) and returns it.

    It is rendered by each page (through `page_header.header`), not by app.py: Streamlit
    1.67 drops the first interaction with a widget that lives in the navigation entry script.
    """
    chosen = deeplink.choice(
        st.sidebar.radio,
        "Language / 语言",
        i18n.LANGUAGES,
        key=LANG_KEY,
        default=_preferred_language(),
        format_func=lambda code: {"en": "English", "zh": "中文"}[code],
        always_in_url=True,
        horizontal=True,
    )
    st.session_state[CHOSEN_LANG_KEY] = chosen
    return chosen


def lang() -> str:
    """The language of this run: the switch's value, else the preferred one."""
    value = st.session_state.get(LANG_KEY)
    return value if value in i18n.LANGUAGES else _preferred_language()


def t(key: str, **values: object) -> str:
    """The catalogue's text at `key` in the reader's language, placeholders filled."""
    return i18n.text(lang(), key, **values)


def coded_choice(
    widget, label_key: str, options, *, key: str, default: str, labels: str, **kwargs
) -> str:
    """A choice carried in the URL by its option code (ui.deeplink.choice), labelled from the
    catalogue: the widget at `label_key`, each option at f"{labels}{code}"."""
    return deeplink.choice(
        widget,
        t(label_key),
        options,
        key=key,
        default=default,
        format_func=lambda code: t(f"{labels}{code}"),
        **kwargs,
    )


def page_link(page_file: str, *, label: str, icon: str, where=st, **query: str) -> None:
    """`where.page_link` to another page of the lab, opening it in the reader's language, in
    workshop mode if it is on and in the reader's live room (ui.workshop, ui.room_panel), with
    `query` (a deep link's parameters), or with none given, as the page was last left.

    They all travel in the link because Streamlit drops a page's query parameters on a page
    change: the page it opens would write them back after loading (`?lang=`, and the
    parameters ui.deeplink gives back to a bare return), and Streamlit's frontend pushes each
    such write as a browser-history entry of its own, so Back would land on the page just
    opened (issue 31). With them in the link those writes change nothing (ui.deeplink leaves
    an unchanged parameter alone): one click, one history entry.
    """
    page = next(p for p in PAGES if p.file == page_file)
    params = query or deeplink.last_parameters(page.key)
    carried = {LANG_KEY: lang(), **workshop.carried(), **room_panel.carried()}
    where.page_link(page_file, label=label, icon=icon, query_params={**params, **carried})
