"""A participant's seat in a live room, kept by their browser: issued by the server, claimed
back with a secret that only that browser holds, in a first-party cookie.

Why a cookie: the browser sends it with the connection every Streamlit tab opens, so the
server knows the seat on a tab's very first run - after a reload, in a second tab of the same
browser, after a restart of the server - with no round trip through the page. Local storage
would need the page to send the secret back first (through the URL, where it would be
copied, bookmarked and shown on screen). The cookie holds a random secret and nothing else
(no name, no account), is the lab's own (SameSite=Strict, Secure over https), and ends with
the room (Max-Age = the room's time left); the database keeps only the secret's hash
(pclab.rooms.store). A seat's id in the URL (`seat=`) says which seat a page shows; it
writes nothing: a value that is not this browser's seat is refused, and the page says so.

    from pclab.ui import room_seat     # room_panel.arrive calls take(); sidebar calls keep()
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import streamlit as st

from pclab.rooms import rules
from pclab.rooms.store import RoomStore

PREFIX = "pcl_seat_"  # a cookie per room: pcl_seat_<CODE>=<secret>

COOKIE = """<script>
(() => {
  const secure = window.location.protocol === "https:" ? "; Secure" : "";
  document.cookie = %(name)s + "=" + %(value)s + "; Max-Age=" + %(age)d
    + "; Path=/; SameSite=Strict" + secure;
})();
</script>"""


def browser_cookies() -> Mapping[str, str]:
    """The cookies this tab's browser sent when it connected (read once per connection:
    a cookie written since reaches the server with the next tab, reload or reconnect)."""
    return st.context.cookies


def browser_secrets() -> dict[str, str]:
    """{room code: the seat's secret} for each room this browser holds a seat in."""
    return {
        name[len(PREFIX) :]: value
        for name, value in browser_cookies().items()
        if name.startswith(PREFIX) and rules.well_formed(name[len(PREFIX) :], rules.CODE_LENGTH)
    }


def client() -> str:
    """This tab's client for the per-client cap: its network address (rules.client_of).
    Behind a proxy on the same machine Streamlit's server takes the visitor's address from
    X-Forwarded-For; FORWARDED_ALLOW_IPS names other proxies it may trust."""
    return rules.client_of(st.context.ip_address)


def take(store: RoomStore, code: str) -> tuple[rules.Refused | None, str, str]:
    """(a refusal to tell, the seat, its secret): this browser's seat in room `code` (its
    cookie's), else a new one. A cookie whose secret no seat of the room holds (made up, or
    from a room's earlier database) is refused: the browser gets a seat of its own. Raises
    Refused when the room is gone, full, or has seated this client as often as it may."""
    secret = browser_secrets().get(code)
    if secret is not None:
        seat = store.seat_of(code, secret)
        if seat is not None:
            return None, seat, secret
    issued = store.join(code, client=client())
    refused = None if secret is None else rules.Refused("seat_unknown", "the cookie's seat")
    return refused, issued.seat, issued.secret


def keep(code: str, secret: str, seconds_left: float) -> None:
    """Write (again) the seat's cookie in the browser, until the room ends. Rendered on every
    run in the room: it costs no space, and a browser that dropped it gets it back."""
    values = {"name": json.dumps(PREFIX + code), "value": json.dumps(secret)}
    _script(values | {"age": max(0, int(seconds_left))})


def forget(code: str) -> None:
    """Delete the seat's cookie (the participant left, or the room is gone)."""
    _script({"name": json.dumps(PREFIX + code), "value": json.dumps(""), "age": 0})


def _script(values: dict[str, object]) -> None:
    st.sidebar.html(COOKIE % values, unsafe_allow_javascript=True)
