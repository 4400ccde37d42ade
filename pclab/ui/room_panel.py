"""The live room in the sidebar: open a room (the presenter), join one from its link (a
participant), and the room's code, join link and QR code.

Who is who is kept in the URL: the presenter's link carries `?room=CODE&host=KEY` (the key
proves the presenter; the database keeps only its hash), a participant's `?room=CODE&seat=ID`.
The per-browser seat lives in the URL rather than in a cookie or the browser's storage: a
Streamlit session ends with the tab, the lab sets no cookies, and the URL survives a reload,
a restart of the server and a bookmark, so a participant who comes back keeps their
predictions (and a seat reveals nothing: no name, no account). The session keeps them too,
and each run writes them back into the URL, which Streamlit empties on a page change.

ui.page_header calls it (`arrive` before the workshop toggle, `sidebar` after) and passes `t`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit, urlunsplit

import streamlit as st

from pclab.rooms import location, qr
from pclab.rooms.rules import Refused
from pclab.rooms.store import RoomStore
from pclab.runners.settings import Settings

Text = Callable[..., str]
ROOM, SEAT, HOST = "room_code", "room_seat", "room_host_key"  # session keys
NOTICE = "room_notice"  # (reason, page) of a link's room that could not be used
URL_NAMES = {ROOM: "room", SEAT: "seat", HOST: "host"}
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0")


@dataclass(frozen=True)
class Role:
    """This session in a room: the presenter (`host_key`) or a participant (`seat`)."""

    code: str
    seat: str | None = None
    host_key: str | None = None


@st.cache_resource(show_spinner=False, on_release=RoomStore.close)
def room_store() -> RoomStore:
    """The server's one rooms database (PCL_ROOM_DB, else the data folder's file)."""
    configured = Settings.from_env(os.environ).room_db
    return RoomStore(location.database_path(configured, os.environ))


def role() -> Role | None:
    code = st.session_state.get(ROOM)
    if not code:
        return None
    return Role(code, st.session_state.get(SEAT), st.session_state.get(HOST))


def _keep(**values: str | None) -> None:
    """Hold the room in the session and in the URL (None: drop it from both)."""
    for key, value in values.items():
        name = URL_NAMES[key]
        if value is None:
            st.session_state.pop(key, None)
            st.query_params.pop(name, None)
            continue
        st.session_state[key] = value
        if st.query_params.get(name) != value:
            st.query_params[name] = value


def leave() -> None:
    _keep(**dict.fromkeys(URL_NAMES))


def _from_link(key: str) -> str | None:
    return st.query_params.get(URL_NAMES[key]) or st.session_state.get(key)


def arrive(workshop_key: str, page: str) -> None:
    """Before the workshop toggle: take the room from the link (or the session), check it and
    take this browser's seat; a participant's first arrival turns workshop mode on. A room
    that cannot be used is dropped, and `notice()` says why on this page."""
    code = _from_link(ROOM)
    if not code:
        return
    host, seat, store = _from_link(HOST), _from_link(SEAT), room_store()
    try:
        if host and store.is_host(code, host):
            _keep(**{ROOM: code, HOST: host, SEAT: None})
            return
        if (st.session_state.get(ROOM), st.session_state.get(SEAT)) == (code, seat):
            if store.expires_at(code) is None:
                raise Refused("gone", "the room expired")
            return  # this session's seat, already checked: no write on every run
        first = st.session_state.get(ROOM) != code
        _keep(**{ROOM: code, SEAT: store.join(code, seat), HOST: None})
        if first:
            st.session_state[workshop_key] = True  # figures hide until the presenter reveals
    except Refused as refused:
        leave()
        st.session_state[NOTICE] = (refused.reason, page)


def notice(t: Text, page: str) -> None:
    """The reason a link's room could not be used, on the page it was opened on."""
    found = st.session_state.get(NOTICE)
    if found and found[1] == page:
        st.warning(t(f"room.refused.{found[0]}"), icon=":material/meeting_room:")
    elif found:
        st.session_state.pop(NOTICE)


def join_link(code: str, lang: str) -> str:
    """The participants' link: this page, at the address the presenter's browser uses."""
    url = urlsplit(st.context.url or "http://localhost:8501/")
    query = urlencode({"room": code, "lang": lang})
    return urlunsplit((url.scheme or "http", url.netloc, url.path or "/", query, ""))


def _show_big(t: Text, link: str, code: str) -> None:
    @st.dialog(t("room.qr_title"), width="large")
    def big() -> None:
        st.markdown(f"## {t('room.code')} **{code}**")
        st.image(qr.png(link, 16), width=640)
        st.code(link, language=None, wrap_lines=True)

    big()


def _presenter(t: Text, current: Role, lang: str) -> None:
    side, store = st.sidebar, room_store()
    link = join_link(current.code, lang)
    side.markdown(f"**{t('room.presenting')}** · {t('room.code')} `{current.code}`")
    side.image(qr.png(link, 6), caption=t("room.scan"), width="stretch")
    side.code(link, language=None, wrap_lines=True)
    if (urlsplit(link).hostname or "") in LOCAL_HOSTS:
        side.warning(t("room.localhost"), icon=":material/wifi_off:")
    left = max(0.0, (store.expires_at(current.code) or time.time()) - time.time())
    side.caption(t("room.expires", hours=int(left // 3600), minutes=int(left % 3600 // 60)))
    if side.button(t("room.qr_large"), key="room_qr_large", icon=":material/qr_code_2:"):
        _show_big(t, link, current.code)


def sidebar(t: Text, workshop: bool, lang: str, page: str) -> None:
    """After the workshop toggle: the room's panel, or the button that opens one (and on the
    page, why a link's room could not be used)."""
    notice(t, page)
    current = role()
    if current and current.host_key:
        _presenter(t, current, lang)
    elif current:
        st.sidebar.info(t("room.joined", code=current.code), icon=":material/groups:")
    elif workshop and st.sidebar.button(
        t("room.open"), key="room_open", icon=":material/co_present:"
    ):
        try:
            opened = room_store().open_room()
        except Refused as refused:
            st.sidebar.error(t(f"room.refused.{refused.reason}"), icon=":material/block:")
            return
        _keep(**{ROOM: opened.code, HOST: opened.host_key, SEAT: None})
        _presenter(t, role() or Role(opened.code), lang)
    if current and st.sidebar.button(t("room.leave"), key="room_leave"):
        leave()
        st.rerun()
