"""A live room in Chromium (issue 33): a presenter and three participants in separate browser
contexts (one in Chinese) answer page 02's exercise; the presenter's count and histogram
update without a click; Reveal gives the room's result and closes the exercise on every
participant's page; the server is then restarted on the same database and the room, its
predictions and its reveal are all still there.

The server runs at the network name live-room.test (mapped to 127.0.0.1 inside Chromium, as
test_workshop_room does), so the join link is the one a room would scan. 800 px, dark theme.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest

from pclab.ui import i18n
from tests.e2e.conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    screenshot,
    streamlit_server,
    wait_for_app,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
HOST = "live-room.test"
NARROW = {"width": 800, "height": 1000}
FOREGROUND = [
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]
ANSWER = "-0.5"  # page 02's preset: DDP's mean of local means moves θ by -0.5


@pytest.fixture(scope="module")
def room_browser(playwright):
    # Each context stands for a phone of its own, in the foreground: no timer throttling for
    # the tabs Chromium would otherwise treat as hidden behind the presenter's.
    args = [*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {HOST} 127.0.0.1", *FOREGROUND]
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
    yield chromium
    chromium.close()


def open_tab(browser, locale: str = "en-US"):
    context = browser.new_context(viewport=NARROW, locale=locale, color_scheme="dark")
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    return context, tab


def open_sidebar(tab) -> None:
    if tab.locator('[data-testid="stSidebar"][data-collapsed="true"]').count():
        tab.locator('[data-testid="stExpandSidebarButton"]').click()
        tab.locator('[data-testid="stSidebar"][data-collapsed="false"]').wait_for()


def main_text(tab) -> str:
    return tab.locator('[data-testid="stMain"]').inner_text()


def wait_text(tab, text: str, timeout_s: float = 30) -> None:
    """Until the page shows `text`, with no click: the live parts update on their own."""
    tab.get_by_text(text, exact=False).first.wait_for(timeout=timeout_s * 1000)


def answer(tab, lang: str, value: str) -> None:
    field = tab.get_by_label(i18n.text(lang, "exercise.your_prediction"))
    field.fill(value)
    field.press("Enter")
    wait_text(tab, i18n.text(lang, "room.recorded"))


def presenter_opens_a_room(tab, url: str) -> str:
    tab.goto(f"{url}/ledger?lang=en&workshop=true")
    wait_for_app(tab)
    open_sidebar(tab)
    tab.get_by_role("button", name=i18n.text("en", "room.open")).click()
    tab.wait_for_url(re.compile(r"host="))
    wait_for_app(tab)
    sidebar = tab.locator('[data-testid="stSidebar"]')
    assert sidebar.locator("img").count() >= 1  # the QR code
    link = sidebar.locator('[data-testid="stCode"]').first.inner_text().strip()
    parts = urlsplit(link)
    assert parts.hostname == HOST and parts.path == "/ledger"
    query = parse_qs(parts.query)
    assert query["lang"] == ["en"] and set(query) == {"room", "lang"}  # no presenter key
    assert query["room"] == parse_qs(urlsplit(tab.url).query)["room"]
    tab.get_by_role("button", name=i18n.text("en", "room.qr_large")).click()
    dialog = tab.get_by_role("dialog")
    assert dialog.locator("img").bounding_box()["width"] >= 500  # for the back of the room
    tab.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    # "Copy link to this scenario" never hands out the presenter's key.
    tab.locator("button.pcl-share").dispatch_event("click")
    shared = tab.locator("input.pcl-share-link")
    shared.wait_for(state="attached")
    assert "room=" in shared.input_value() and "host=" not in shared.input_value()
    return link


def test_a_room_of_three_answers_page_02_live_reveal_and_restart(room_browser, tmp_path):
    env = {"PCL_ROOM_DB": str(tmp_path / "rooms.sqlite3"), "PCL_WARM_POOL": "0"}
    contexts = []
    try:
        with streamlit_server(env=env) as url:
            url = url.replace("127.0.0.1", HOST)
            context, host = open_tab(room_browser)
            contexts.append(context)
            link = presenter_opens_a_room(host, url)
            wait_text(host, i18n.text("en", "room.answered", answered=0, participants=0))

            people = []
            for lang, value in (("en", ANSWER), ("zh", "-0.51"), ("en", "0.4")):
                context, tab = open_tab(room_browser, "zh-CN" if lang == "zh" else "en-US")
                contexts.append(context)
                tab.goto(link.replace("lang=en", f"lang={lang}"))
                wait_for_app(tab)
                assert "seat=" in tab.url  # this browser's place, kept by the link
                reveal = tab.get_by_role("button", name=i18n.text(lang, "exercise.reveal"))
                assert reveal.is_disabled()  # the presenter reveals for the room
                assert tab.locator('[data-testid="stMetric"]').count() == 0  # figures hidden
                answer(tab, lang, value)
                people.append((lang, tab))
                # The presenter's page, untouched, counts each answer within seconds.
                n = len(people)
                wait_text(host, i18n.text("en", "room.answered", answered=n, participants=n))
            chart = host.locator('[data-testid="stMain"] [data-testid="stVegaLiteChart"]')
            chart.first.wait_for()
            screenshot(host, "live-room-presenter-before")

            host.get_by_role("button", name=i18n.text("en", "exercise.reveal")).click()
            result = i18n.text(
                "en", "room.result_number", right=2, answered=3, answer=ANSWER, within=5
            )
            wait_text(host, result)
            screenshot(host, "live-room-presenter")
            for lang, tab in people:  # closed on every participant's page, with no click
                try:
                    wait_text(tab, i18n.text(lang, "room.closed"))
                except Exception:
                    screenshot(tab, f"live-room-participant-{lang}-not-closed")
                    raise
                tab.locator('[data-testid="stMetric"]').nth(3).wait_for()  # figures shown
                wait_for_app(tab)
                field = tab.get_by_label(i18n.text(lang, "exercise.your_prediction"))
                assert field.is_disabled()
                assert tab.locator('[data-testid="stMetric"]').count() == 4
            presenter_url, seat_url = host.url, people[0][1].url

        with streamlit_server(env=env) as url:  # the same database, a new server
            url = url.replace("127.0.0.1", HOST)
            port = urlsplit(url).port
            for tab, old in ((host, presenter_url), (people[0][1], seat_url)):
                parts = urlsplit(old)
                tab.goto(parts._replace(netloc=f"{HOST}:{port}").geturl())
                wait_for_app(tab)
            wait_text(host, result)  # the room, its predictions and its reveal survived
            tab = people[0][1]
            wait_text(tab, i18n.text("en", "room.closed"))
            field = tab.get_by_label(i18n.text("en", "exercise.your_prediction"))
            assert float(field.input_value()) == float(ANSWER)  # the prediction came back
    finally:
        for context in contexts:
            context.close()
