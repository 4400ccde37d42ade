"""The live room in the sidebar: open a room (the presenter), join one from its link (a
participant), and the room's code, join link and QR code.

The presenter's link carries `?room=CODE&host=KEY` (the key proves the presenter; the
database keeps only its hash), a participant's `?room=CODE&seat=ID`. A participant's seat is
the server's to issue and their browser's to keep (ui.room_seat: a secret in a first-party
cookie), so a reload, a second tab and a restarted server find the same seat, and a seat id
typed into a URL is refused. The session keeps the room too, and each run writes it back into
the URL, which Streamlit empties on a page change; links to other pages carry it (`carried`).

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
from pclab.ui import room_seat

Text = Callable[..., str]
ROOM, SEAT, HOST = "room_code", "room_seat", "room_host_key"  # session keys, in the URL too
SECRET = "room_seat_secret"  # the seat's secret: in the session and the cookie, never the URL
NOTICE = "room_notice"  # (reason, page) of a link's room or seat that could not be used
LEFT = "room_left"  # rooms this session left or found gone: their cookies are not taken again
URL_NAMES = {ROOM: "room", SEAT: "seat", HOST: "host"}
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0")


@dataclass(frozen=True)
class Role:
    """This session in a room: the presenter (`host_key`) or a participant (`seat`, and the
    `secret` that writes its predictions)."""

    code: str
    seat: str | None = None
    host_key: str | None = None
    secret: str | None = None

    @property
    def participant(self) -> bool:
        return self.host_key is None


@st.cache_resource(show_spinner=False, on_release=RoomStore.close)
def room_store() -> RoomStore:
    """The server's one rooms database (PCL_ROOM_DB, else the data folder's file)."""
    configured = Settings.from_env(os.environ).room_db
    return RoomStore(location.database_path(configured, os.environ))


def role() -> Role | None:
    code = st.session_state.get(ROOM)
    if not code:
        return None
    state = st.session_state
    return Role(code, state.get(SEAT), state.get(HOST), state.get(SECRET))


def carried() -> dict[str, str]:
    """The room's parameters a link to another page carries (ui.language.page_link)."""
    return {
        name: st.session_state[key] for key, name in URL_NAMES.items() if st.session_state.get(key)
    }


def _keep(**values: str | None) -> None:
    """Hold the room in the session, and in the URL what goes there (None: drop it)."""
    for key, value in values.items():
        name = URL_NAMES.get(key)
        if value is None:
            st.session_state.pop(key, None)
            if name:
                st.query_params.pop(name, None)
            continue
        st.session_state[key] = value
        if name and st.query_params.get(name) != value:
            st.query_params[name] = value


def leave() -> None:
    """Out of the room: the session forgets it, the URL drops it, the cookie goes."""
    code = st.session_state.get(ROOM)
    if code:
        st.session_state[LEFT] = {*st.session_state.get(LEFT, ()), code}
    _keep(**dict.fromkeys([*URL_NAMES, SECRET]))


def _from_link(key: str) -> str | None:
    return st.query_params.get(URL_NAMES[key]) or st.session_state.get(key)


def _remembered(store: RoomStore) -> str | None:
    """A room this browser holds a seat in, when the URL names none (a page opened in a new
    tab, a bookmark without the room): its cookie's room, if still open."""
    left = st.session_state.setdefault(LEFT, set())
    for code, secret in room_seat.browser_secrets().items():
        if code not in left and store.seat_of(code, secret):
            return code
        left.add(code)  # gone, or not this browser's: asked once per session
    return None


def _participant(store: RoomStore, code: str, page: str) -> None:
    """This browser's seat in the room (the session's, else its cookie's, else a new one);
    a `seat=` in the link that is not it is refused, and said."""
    asked = st.query_params.get(URL_NAMES[SEAT])
    state = st.session_state
    if state.get(ROOM) == code and state.get(SECRET) and state.get(SEAT):
        if store.expires_at(code) is None:
            raise Refused("gone", "the room expired")
        seat, secret, refused = state[SEAT], state[SECRET], None  # checked: no query a run
    else:
        refused, seat, secret = room_seat.take(store, code)
    if asked and asked != seat:
        refused = Refused("seat_not_yours", "the link's seat is another browser's")
    if refused:
        state[NOTICE] = (refused.reason, page)
    state[LEFT] = set(state.get(LEFT, ())) - {code}  # back in a room it had left
    _keep(**{ROOM: code, SEAT: seat, SECRET: secret, HOST: None})


def arrive(page: str) -> None:
    """Before the workshop toggle: take the room from the link (or the session, or this
    browser's cookie), check it and take this browser's seat. A room that cannot be used is
    dropped, and `notice()` says why on this page."""
    store = room_store()
    code = _from_link(ROOM) or _remembered(store)
    if not code:
        return
    host = _from_link(HOST)
    try:
        if host and store.is_host(code, host):
            _keep(**{ROOM: code, HOST: host, SEAT: None, SECRET: None})
            return
        _participant(store, code, page)
    except Refused as refused:
        leave()
        st.session_state[NOTICE] = (refused.reason, page)


def notice(t: Text, page: str) -> None:
    """The reason a link's room or seat could not be used, on the page it was opened on."""
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


def _cookie(current: Role | None) -> None:
    """The participant's cookie written (again) in the browser; a room left, deleted."""
    if current and current.secret:
        left = (room_store().expires_at(current.code) or time.time()) - time.time()
        room_seat.keep(current.code, current.secret, left)
    for code in st.session_state.get(LEFT, ()):
        if code in room_seat.browser_secrets():
            room_seat.forget(code)


def sidebar(t: Text, workshop: bool, lang: str, page: str) -> None:
    """After the workshop toggle: the room's panel, or the button that opens one (and on the
    page, why a link's room or seat could not be used)."""
    notice(t, page)
    current = role()
    _cookie(current)
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
        _keep(**{ROOM: opened.code, HOST: opened.host_key, SEAT: None, SECRET: None})
        _presenter(t, role() or Role(opened.code), lang)
    if current and st.sidebar.button(t("room.leave"), key="room_leave"):
        leave()
        st.rerun()
