"""An address that is no page of the lab (a mistyped or outdated link, `/nope`): a page of
its own, in the reader's language, in place of Streamlit's English "Page not found" dialog.

Streamlit 1.67 sends that dialog from `st.navigation` whenever the URL's path names no
registered page (streamlit/commands/navigation.py: `if not page_to_return:
send_page_not_found(ctx)`), and its frontend always opens it: the one switch,
`blockErrorDialogs`, is an embedding host's and hides every error dialog with it (the server's
own /_stcore/host-config answers False). So app.py registers one more page, hidden from the
sidebar, at exactly the path asked for when it is none of the lab's: the navigation finds a
page, sends no dialog, and runs `show` (a page of no section: it is in no workshop path).

    python -c "from pclab.ui.not_found import page_name; print(page_name('http://h/a/nope', 'a'))"
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

import streamlit as st

from pclab.ui.language import page_link, t
from pclab.ui.page_header import header
from pclab.ui.pages import HOME


def page_name(url: str, base_url_path: str = "") -> str:
    """The page a URL asks for, as Streamlit's navigation looks it up: its path without the
    server's base path, decoded, and only the last segment (`st.context.url` may put the
    current page's path after the one typed: "/xledger" reads "/x/xledger" on a rerun, as
    Streamlit trims a known page's name, "ledger", from its end). "" is the home page."""
    path = unquote(urlsplit(url).path).strip("/")
    base = base_url_path.strip("/")
    if base and (path == base or path.startswith(f"{base}/")):
        path = path[len(base) :].strip("/")
    return path.rsplit("/", 1)[-1]


def requested_page() -> str:
    """The page this run's URL asks for ("" for the home page, or outside a browser)."""
    return page_name(st.context.url or "", st.get_option("server.baseUrlPath") or "")


def unknown_path_page(known: Iterable[str]) -> st.Page | None:
    """A hidden page at the path this run's URL asks for, when that path is none of the
    `known` page paths ("" is the home page); None otherwise."""
    wanted = requested_page()
    if wanted in {"", *known}:
        return None
    return st.Page(show, title=t("not_found.nav"), url_path=wanted, visibility="hidden")


def show() -> None:
    """The page: no page at this address, said in the reader's language, with the address
    asked for (as text, never markdown) and the way on."""
    header("not_found", share=False)
    st.caption(t("not_found.asked"))
    st.code(f"/{requested_page()}", language=None, wrap_lines=True)
    page_link(HOME.file, label=t("not_found.home"), icon=HOME.icon)
