"""The lab in a real room (issue 17): Chromium opens it at a network name over plain http,
in a narrow window and the dark theme, and does what an instructor and learners do.

The host name workshop.test is mapped to 127.0.0.1 inside Chromium (--host-resolver-rules),
so nothing leaves the machine, yet the page is a non-secure origin with no clipboard - as on
an instructor's laptop serving the room's Wi-Fi. One server for the session (conftest), one
browser for this module.
"""

from __future__ import annotations

import io
import re

import pytest

from pclab.ui import i18n
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, screenshot, wait_for_app
from tests.e2e.page_walk import TABLES, registered_url_paths

pytestmark = pytest.mark.e2e

HOST = "workshop.test"
NARROW = {"width": 800, "height": 900}
COLLAPSED = "() => document.querySelector('[data-testid=\"stSidebar\"]')?.dataset.collapsed"
WCAG_AA = 4.5  # minimum contrast for body text
# Playwright's actionability, checked for every control at once in the page: visible, enabled,
# inside the window once scrolled to, and the element under its centre is the control
# itself. Hover-only affordances (heading anchors, a table's toolbar) and the contents of
# closed expanders are left out; a slider is checked by its thumb.
CHECK_LAYOUT = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const shown = (el) => { const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== 'hidden'; };
  const closed = (el) => {
    const d = el.closest('details');
    return d && !d.open && !el.closest('summary');
  };
  const name = (el) => (el.getAttribute('aria-label') || el.innerText || el.dataset.testid
    || el.tagName).trim().slice(0, 50);
  const controls = [...main.querySelectorAll('button, a[href], summary, input, '
      + '[data-baseweb=select], label[data-baseweb=radio], label[data-baseweb=checkbox]')]
    .filter((el) => !(el.tagName === 'INPUT' && ['radio', 'checkbox'].includes(el.type)))
    .map((el) => el.type === 'range' ? el.parentElement.parentElement : el)
    .filter((el) => shown(el) && !el.disabled && !closed(el)
      && !el.closest('[data-testid=stElementToolbar], [data-testid=stHeaderActionElements]'));
  const blocked = [];
  for (const el of controls) {
    el.scrollIntoView({block: 'center', inline: 'nearest'});
    const r = el.getBoundingClientRect();
    if (r.left < -1 || r.right > window.innerWidth + 1) {
      blocked.push(`cut off: ${name(el)}`);
      continue;
    }
    // a link that wraps is clicked on one of its lines, as a reader would: its first box
    const box = el.getClientRects()[0] || r;
    const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    if (!hit || !el.contains(hit)) blocked.push(`covered: ${name(el)}`);
  }
  const cut = [...main.querySelectorAll('[data-testid=stMetric] *, button, button *')]
    .filter((el) => shown(el) && el.scrollWidth > el.clientWidth + 1
      && getComputedStyle(el).overflow !== 'visible')
    .map((el) => `cut: ${el.innerText.trim().slice(0, 50)}`);
  const split = [];  // a Latin word broken across two lines in a label, metric or button
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const labels = '[data-testid=stWidgetLabel], [data-testid=stMetric], button';
    if (!node.parentElement.closest(labels)) continue;
    for (const word of node.nodeValue.matchAll(/[A-Za-z0-9_.+-]{2,}/g)) {
      const range = document.createRange();
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (lines.size > 1) split.push(word[0]);
    }
  }
  const metrics = main.querySelectorAll('[data-testid=stMetricValue]').length;
  const problems = [...blocked, ...cut, ...split.map((w) => `split: ${w}`)];
  return {controls: controls.length, metrics, problems};
}"""


@pytest.fixture(scope="module")
def room_browser(playwright):
    """Chromium that resolves workshop.test to this machine and nothing else."""
    args = [*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {HOST} 127.0.0.1"]
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def room_url(app_url):
    return app_url.replace("127.0.0.1", HOST)


def open_tab(browser, *, locale: str = "en-US", dark: bool = True, viewport=NARROW):
    scheme = "dark" if dark else "light"
    context = browser.new_context(viewport=viewport, locale=locale, color_scheme=scheme)
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    return context, tab


def heading(tab) -> str:
    return tab.locator("h1").first.inner_text()


def open_sidebar(tab) -> None:
    """The narrow window collapses the sidebar: open it as a person would."""
    if tab.locator('[data-testid="stSidebar"][data-collapsed="true"]').count():
        tab.locator('[data-testid="stExpandSidebarButton"]').click()
        tab.locator('[data-testid="stSidebar"][data-collapsed="false"]').wait_for()


def go_by_sidebar(tab, link_text: str) -> None:
    """Follow a sidebar navigation link."""
    open_sidebar(tab)
    tab.locator('[data-testid="stSidebarNav"] a', has_text=link_text).click()
    wait_for_app(tab)


def wait_for_heading(tab, text: str) -> None:
    tab.wait_for_function("(t) => document.querySelector('h1')?.innerText.includes(t)", arg=text)
    wait_for_app(tab)


@pytest.mark.parametrize(
    ("locale", "link", "chosen"),
    [("en-US", "/?lang=zh", "zh"), ("zh-CN", "/", "en")],
    ids=["english-browser-keeps-chinese", "chinese-browser-keeps-english"],
)
def test_language_travels_with_sidebar_navigation(room_browser, room_url, locale, link, chosen):
    context, tab = open_tab(room_browser, locale=locale)
    try:
        tab.goto(room_url + link)
        wait_for_app(tab)
        if chosen == "en":  # a Chinese browser opens in Chinese; the learner picks English
            assert heading(tab) == i18n.text("zh", "home.title")
            open_sidebar(tab)
            tab.locator('[data-testid="stSidebar"] label', has_text="English").click()
        wait_for_heading(tab, i18n.text(chosen, "home.title"))
        for section in ("denominator", "ledger"):
            go_by_sidebar(tab, i18n.text(chosen, f"{section}.nav"))
            wait_for_heading(tab, i18n.text(chosen, f"{section}.title"))
            assert f"lang={chosen}" in tab.url
        # An in-page link (home's start link) keeps it too.
        go_by_sidebar(tab, i18n.text(chosen, "home.nav"))
        tab.locator("a", has_text=i18n.text(chosen, "home.start_link")).click()
        wait_for_heading(tab, i18n.text(chosen, "denominator.title"))
        assert f"lang={chosen}" in tab.url
    finally:
        context.close()


def test_copy_link_shows_the_link_where_the_browser_gives_no_clipboard(room_browser, room_url):
    context, tab = open_tab(room_browser, locale="zh-CN")
    try:
        tab.goto(f"{room_url}/ledger?lang=zh&ledger_n_a=5")
        wait_for_app(tab)
        assert tab.evaluate("() => window.isSecureContext") is False  # plain http, a network name
        tab.evaluate("() => document.addEventListener('copy', () => { window.pclCopied = true; })")
        tab.locator("button.pcl-share").click()
        field = tab.locator("input.pcl-share-link")
        field.wait_for(state="visible")
        link = field.input_value()
        assert link.startswith(f"http://{HOST}:") and "/ledger" in link
        assert "lang=zh" in link and "ledger_n_a=5" in link
        # Selected, so Ctrl+C copies it; and the note says what happened, in Chinese.
        selected = """() => {
            const f = document.activeElement;
            return f.value.slice(f.selectionStart, f.selectionEnd);
        }"""
        assert tab.evaluate(selected) == link
        note = tab.locator(".pcl-share-note").inner_text()
        copied = tab.evaluate("() => window.pclCopied === true")
        said = "copied_here" if copied else "copy_yourself"
        assert note == i18n.text("zh", f"common.share.{said}")
        screenshot(tab, "room-copy-fallback")
        # A number outside its input's range: the reason in Chinese, not Streamlit's English.
        field = tab.get_by_label(i18n.text("zh", "ledger.count_a"))
        field.fill("99999")
        field.press("Enter")
        said = i18n.text("zh", "common.range.between", low=0, high=10000)
        tab.get_by_text(said).first.wait_for(state="attached")
        assert "allowed range" not in tab.locator('[data-testid="stMain"]').inner_text()
    finally:
        context.close()


def test_every_page_fits_a_narrow_window(room_browser, room_url):
    """800 x 900, dark: the sidebar starts collapsed, every control can be clicked, no metric
    or button is cut, no table scrolls inside its box, no word in a label is broken; and the
    Full Transformer page's SGD option (once under the sidebar) is really clicked. English
    page by page as a reader at this width goes: the home page opened fresh, then each page
    by the sidebar, opened and closed again after the pick; Chinese on a sample, each opened
    fresh (its labels are shorter; long Latin words are what break a layout)."""
    context, tab = open_tab(room_browser)
    sidebar = tab.locator('[data-testid="stSidebar"]')
    problems = {}

    def look(where: str) -> None:
        assert tab.locator('[data-testid="stException"]').count() == 0, where
        found = tab.evaluate(CHECK_LAYOUT)
        assert found["controls"] > 0, where
        # and no table scrolls inside its box (page 09's grid did, by 110 px in English)
        found["problems"] += [f"table scrolls: {t}" for t in tab.evaluate(TABLES)]
        if found["problems"]:
            problems[where] = found["problems"]

    try:
        for path in registered_url_paths():
            if not path:
                tab.goto(f"{room_url}/?lang=en")
                wait_for_app(tab)
                assert sidebar.get_attribute("data-collapsed") == "true"  # from the start
            else:
                open_sidebar(tab)
                tab.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]').click()
                tab.wait_for_function(f"() => location.pathname.endsWith('/{path}')")
                wait_for_app(tab)
                tab.wait_for_function(f"() => ({COLLAPSED})() === 'true'", timeout=10_000)
            look(f"{path or 'home'} (en)")
            if path == "ledger":
                screenshot(tab, "room-narrow-ledger")
        for path in ("parameters", "experiment"):
            tab.goto(f"{room_url}/{path}?lang=zh")
            wait_for_app(tab)
            assert sidebar.get_attribute("data-collapsed") == "true", path
            look(f"{path} (zh)")
        assert problems == {}
        tab.goto(f"{room_url}/experiment?lang=en")
        wait_for_app(tab)
        sgd = i18n.text("en", "experiment.optimizer.sgd")
        tab.get_by_role("radio", name=sgd, exact=True).click()
        tab.wait_for_url(re.compile("exp_optimizer=sgd"))
    finally:
        context.close()


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """WCAG 2 contrast ratio of two sRGB colours."""

    def luminance(rgb):
        c = [x / 255 for x in rgb[:3]]
        c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def highlight_text_contrast(png: bytes, background: tuple[int, int, int]) -> tuple[float, int]:
    """The contrast of the text drawn on `background` cells, and how many background pixels
    were found. Text pixels are those lying between two background pixels on their row (a
    glyph inside a highlighted cell), less the table's vertical grid lines (a column that
    interrupts the background on most rows); the largest contrast among them with the
    background is the glyphs' solid core."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    width, height = image.size
    pixels = image.load()

    def is_background(p) -> bool:
        return max(abs(p[i] - background[i]) for i in range(3)) <= 3

    inside: dict[int, list[tuple[int, int, int]]] = {}  # x -> colours between background
    rows_with_background, found = 0, 0
    for y in range(height):
        row = [pixels[x, y] for x in range(width)]
        marks = [x for x, p in enumerate(row) if is_background(p)]
        found += len(marks)
        rows_with_background += bool(marks)
        for left, right in zip(marks, marks[1:]):
            if 1 < right - left <= 40:  # a short run of other pixels inside the cell
                for x in range(left + 1, right):
                    inside.setdefault(x, []).append(row[x])
    lines = [x for x, colours in inside.items() if len(colours) >= 0.6 * rows_with_background]
    text = [p for x, colours in inside.items() if x not in lines for p in colours]
    return max((contrast(p, background) for p in text), default=1.0), found


def test_page_01_highlight_reads_in_the_dark_theme(room_browser, room_url):
    context, tab = open_tab(room_browser, viewport={"width": 1400, "height": 1000})
    try:
        tab.goto(f"{room_url}/denominator?lang=en")
        wait_for_app(tab)
        table = tab.locator('[data-testid="stDataFrame"]').nth(1)  # the update shares
        table.scroll_into_view_if_needed()
        tab.wait_for_timeout(300)  # the canvas paints a frame after scrolling
        ratio, found = highlight_text_contrast(table.screenshot(), (0xFD, 0xE2, 0xE1))
        assert found > 1000, "no highlighted cell found"
        assert ratio >= WCAG_AA, f"highlighted cells: text contrast {ratio:.2f}:1"
        screenshot(tab, "room-dark-denominator")
    finally:
        context.close()


def test_page_03_overflow_gives_no_verdict(room_browser, room_url):
    """Gradient sums of 1e308: the global gradient overflows float64, so the page says so
    and does not claim the update reproduces the objective."""
    context, tab = open_tab(room_browser)
    cells = "_".join(f"{n}~1e308~{n}" for n in (3, 0, 1, 6))  # the preset's counts, huge sums
    try:
        tab.goto(f"{room_url}/framework?lang=en&fw_cells={cells}")
        wait_for_app(tab)
        page_text = tab.locator('[data-testid="stMain"]').inner_text()
        assert i18n.text("en", "framework.overflow") in page_text
        assert i18n.text("en", "framework.verdict_ok") not in page_text
        assert i18n.text("en", "common.undefined") not in page_text
    finally:
        context.close()
