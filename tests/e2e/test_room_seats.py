"""A live room's seats in Chromium (issue 45): one seat per person, kept by the browser.

A participant joins by link - in Chinese at 800 px, dark, and at phone size 390 x 844 - walks
three pages through the sidebar and never sees a figure the exercise hides, reloads and keeps
their seat and answer, and after a restart of the server (the same port and database) is
still in the room; a second tab of the same browser is the same seat; a seat typed into the
URL or a cookie written by hand is refused, and the page says so; a script that floods the
room with joins from one address takes its share of seats (rules.MAX_SEATS_PER_CLIENT) and
the room still seats a real participant.

One server for the module, at the network name seats.test (mapped to 127.0.0.1 inside
Chromium). Rooms are opened straight in its database (the presenter's side is
tests/e2e/test_live_room.py). The flood speaks Streamlit's own protocol over a websocket from
another loopback address, 127.0.0.2, as another machine on the network would.
"""

from __future__ import annotations

import socket
import tempfile
import threading
from urllib.parse import parse_qs, urlsplit

import pytest

from bench.cold_start import free_port, start_server, wait_healthy
from pclab.rooms import rules
from pclab.rooms.store import RoomStore
from pclab.ui import i18n, room_seat
from pclab.ui.pages import PAGES
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, _stop, screenshot, wait_for_app

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
HOST = "seats.test"
PROJECTOR, PHONE = {"width": 800, "height": 900}, {"width": 390, "height": 844}
WALK = ("denominator", "framework", "ledger")  # three pages by the sidebar, back to 02
FLOOD_FROM = "127.0.0.2"
# Every figure a page draws once revealed (page 01-03: metrics and charts), seen at any moment.
WATCH = """(() => {
  window.pclSawFigure = false;
  new MutationObserver(() => {
    if (document.querySelector('[data-testid="stMain"] :is([data-testid="stMetric"],'
        + ' [data-testid="stVegaLiteChart"])')) window.pclSawFigure = true;
  }).observe(document, {childList: true, subtree: true});
})();"""
# The tab loses its server and connects again by itself (a new session on the new process).
LOST = """() => {
  window.pclLost = false;
  const app = document.querySelector('[data-testid="stApp"]');
  new MutationObserver(() => {
    if (app.dataset.testConnectionState !== "CONNECTED") window.pclLost = true;
  }).observe(app, {attributes: true, attributeFilter: ["data-test-connection-state"]});
}"""
RECONNECTED = """() => window.pclLost && document.querySelector('[data-testid="stApp"]')
  .dataset.testConnectionState === 'CONNECTED'"""


class Server:
    """`streamlit run app.py` on one port, stopped and started again on the same port (a
    restart, as a host's service manager does): the tabs reconnect on their own."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.port, self.process = env, 0, None
        self.log = tempfile.TemporaryFile()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, port: int | None = None) -> None:
        for _ in range(3):
            self.port = port or free_port()
            self.process = start_server(self.port, env=self.env, log=self.log)
            if wait_healthy(self.process, f"http://127.0.0.1:{self.port}", timeout_s=60):
                return
            _stop(self.process)
            if port:  # the same port again: no other to try
                break
        self.log.seek(0)
        pytest.fail(f"streamlit did not start: {self.log.read().decode(errors='replace')[-2000:]}")

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start(self.port)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("rooms") / "rooms.sqlite3"
    served = Server({"PCL_ROOM_DB": str(db), "PCL_WARM_POOL": "0", "PCL_PRELOAD": "0"})
    served.db = db
    served.start()
    yield served
    served.stop()
    served.log.close()


@pytest.fixture(scope="module")
def chromium(playwright):
    args = [*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {HOST} 127.0.0.1"]
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
    yield browser
    browser.close()


def new_room(server) -> str:
    store = RoomStore(server.db)
    try:
        return store.open_room().code
    finally:
        store.close()


def seats_in(server, code: str) -> int:
    store = RoomStore(server.db)
    try:
        return store.tally(code, "ledger_ex", "any").participants
    finally:
        store.close()


def browser_context(chromium, viewport=PROJECTOR, locale="en-US"):
    context = chromium.new_context(viewport=viewport, locale=locale, color_scheme="dark")
    context.add_init_script(WATCH)
    return context


def open_page(context, url: str):
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    tab.goto(url)
    wait_for_app(tab)
    return tab


def query(tab) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(tab.url).query).items()}


def main_text(tab) -> str:
    return tab.locator('[data-testid="stMain"]').inner_text()


def answer(tab, lang: str, value: str) -> None:
    field = tab.get_by_label(i18n.text(lang, "exercise.your_prediction"))
    field.fill(value)
    field.press("Enter")
    tab.get_by_text(i18n.text(lang, "room.recorded")).wait_for()


def prediction(tab, lang: str) -> float | None:
    raw = tab.get_by_label(i18n.text(lang, "exercise.your_prediction")).input_value()
    return float(raw) if raw else None


def by_sidebar(tab, lang: str, key: str) -> None:
    """Open the sidebar as a person would and click the page in it."""
    if tab.locator('[data-testid="stSidebar"][data-collapsed="true"]').count():
        tab.locator('[data-testid="stExpandSidebarButton"]').click()
        tab.locator('[data-testid="stSidebar"][data-collapsed="false"]').wait_for()
    page = next(p for p in PAGES if p.key == key)
    tab.locator('[data-testid="stSidebarNav"] a', has_text=i18n.text(lang, page.title_key)).click()
    title = i18n.text(lang, f"{key}.title")
    tab.wait_for_function("(t) => document.querySelector('h1')?.innerText.includes(t)", arg=title)
    wait_for_app(tab)


def in_the_room(tab, lang: str, code: str, seat: str) -> None:
    """The page is the room's: its URL carries the room, the seat and workshop mode, the
    sidebar says so, and the exercise keeps its figures hidden (and none ever showed)."""
    carried = {k: query(tab).get(k) for k in ("room", "seat", "workshop", "lang")}
    assert carried == {"room": code, "seat": seat, "workshop": "true", "lang": lang}, tab.url
    sidebar = tab.locator('[data-testid="stSidebar"]').text_content() or ""
    assert i18n.text(lang, "room.joined", code=code) in sidebar
    assert i18n.text(lang, "exercise.hidden") in main_text(tab)
    assert not tab.evaluate("window.pclSawFigure"), f"a hidden figure showed on {tab.url}"


@pytest.mark.parametrize(
    ("lang", "viewport", "locale"),
    [("zh", PROJECTOR, "zh-CN"), ("en", PHONE, "en-US")],
    ids=["zh-800", "en-390x844"],
)
def test_a_participant_walks_reloads_and_outlives_a_restart(
    chromium, server, lang, viewport, locale
):
    code = new_room(server)
    context = browser_context(chromium, viewport, locale)
    try:
        tab = open_page(context, f"{server.url}/ledger?room={code}&lang={lang}")
        seat = query(tab)["seat"]
        in_the_room(tab, lang, code, seat)
        answer(tab, lang, "-0.5")
        for key in WALK:
            by_sidebar(tab, lang, key)
            in_the_room(tab, lang, code, seat)
        assert prediction(tab, lang) == -0.5  # back on 02: the answer is still there
        tab.reload()
        wait_for_app(tab)
        in_the_room(tab, lang, code, seat)
        assert prediction(tab, lang) == -0.5
        screenshot(tab, f"room-seat-{lang}-{viewport['width']}")

        tab.evaluate(LOST)
        server.restart()  # the same port and database; the tab reconnects by itself
        tab.wait_for_function(RECONNECTED, timeout=90_000)
        wait_for_app(tab)
        in_the_room(tab, lang, code, seat)
        assert prediction(tab, lang) == -0.5
        tab.reload()
        wait_for_app(tab)
        in_the_room(tab, lang, code, seat)
        assert seats_in(server, code) == 1  # one person, one seat, all along
    finally:
        context.close()


def test_a_second_tab_is_the_same_seat(chromium, server):
    code = new_room(server)
    context = browser_context(chromium)
    try:
        first = open_page(context, f"{server.url}/ledger?room={code}&lang=en")
        seat = query(first)["seat"]
        answer(first, "en", "0.4")
        second = open_page(context, f"{server.url}/ledger?room={code}&lang=en")  # the join link
        in_the_room(second, "en", code, seat)
        assert prediction(second, "en") == 0.4
        bare = open_page(context, f"{server.url}/framework")  # no room in its address at all
        in_the_room(bare, "en", code, seat)
        assert seats_in(server, code) == 1
    finally:
        context.close()


def test_a_seat_from_a_link_or_a_forged_cookie_is_refused(chromium, server):
    code = new_room(server)
    owner_context, other_context = browser_context(chromium), browser_context(chromium, PHONE)
    try:
        owner = open_page(owner_context, f"{server.url}/ledger?room={code}&lang=en")
        seat = query(owner)["seat"]
        answer(owner, "en", "-0.5")
        mine = None
        for forged in (seat, "2222222222222222"):  # someone's seat, then a made-up one
            tab = open_page(other_context, f"{server.url}/ledger?room={code}&seat={forged}&lang=zh")
            tab.get_by_text(i18n.text("zh", "room.refused.seat_not_yours")).wait_for()
            assert query(tab)["seat"] not in (seat, forged)
            if mine is None:  # a seat of its own, not the owner's answer
                mine = query(tab)["seat"]
                assert prediction(tab, "zh") is None
                answer(tab, "zh", "7")
            else:  # still its own seat, with its own answer
                assert query(tab)["seat"] == mine and prediction(tab, "zh") == 7
            tab.close()
        owner.reload()
        wait_for_app(owner)
        assert prediction(owner, "en") == -0.5  # nobody else wrote it
        assert seats_in(server, code) == 2  # the other browser has one seat of its own
        forger = browser_context(chromium)
        name, made_up = f"{room_seat.PREFIX}{code}", "Z" * rules.SECRET_LENGTH
        forger.add_cookies([{"name": name, "value": made_up, "url": server.url}])
        tab = open_page(forger, f"{server.url}/ledger?room={code}&lang=en")
        tab.get_by_text(i18n.text("en", "room.refused.seat_unknown")).wait_for()
        kept = {c["name"]: c["value"] for c in forger.cookies()}
        assert kept[name] != made_up and rules.well_formed(kept[name], rules.SECRET_LENGTH)
        forger.close()
    finally:
        owner_context.close()
        other_context.close()


def join_by_script(port: int, code: str) -> None:
    """One scripted join: a websocket from FLOOD_FROM with no cookie, one run of the join
    link's page through Streamlit's own protocol, until the script has finished."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.sync.client import connect

    sock = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(FLOOD_FROM, 0))
    stream = f"ws://127.0.0.1:{port}/_stcore/stream"
    with connect(stream, sock=sock, subprotocols=["streamlit"], open_timeout=60) as ws:
        rerun = BackMsg()
        rerun.rerun_script.query_string = f"room={code}&lang=en"
        ws.send(rerun.SerializeToString())
        while True:
            message = ForwardMsg()
            message.ParseFromString(ws.recv(timeout=120))
            if message.WhichOneof("type") == "script_finished":
                return


def test_a_scripted_flood_of_joins_leaves_the_room_open(chromium, server):
    code = new_room(server)
    tries = rules.MAX_SEATS_PER_CLIENT + 6
    failures: list[BaseException] = []

    def flood(count: int) -> None:
        try:
            for _ in range(count):
                join_by_script(server.port, code)
        except BaseException as error:  # noqa: BLE001 - reported below, in the test's thread
            failures.append(error)

    threads = [threading.Thread(target=flood, args=(tries // 3,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=400)
    assert not failures, failures
    assert seats_in(server, code) == rules.MAX_SEATS_PER_CLIENT  # its share, and no more
    context = browser_context(chromium, PHONE, "zh-CN")
    try:
        tab = open_page(context, f"{server.url}/ledger?room={code}&lang=zh")
        in_the_room(tab, "zh", code, query(tab)["seat"])
        answer(tab, "zh", "-0.5")
        assert seats_in(server, code) == rules.MAX_SEATS_PER_CLIENT + 1
    finally:
        context.close()
