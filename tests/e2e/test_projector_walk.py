"""A workshop room on a projector (issue 24): 800 x 900, Chinese, the dark theme, every page
reached through the sidebar as an instructor does it.

After each click the sidebar must close again (it would otherwise keep half the width), the
main column must have the window's width, and nothing may be cut: the tables (static and
interactive), code blocks, selects, heat maps and metrics fit (their scrollWidth within their
clientWidth, their right edge inside the main column). On "Check a trainer" a real check of a
wrong trainer runs: its failed verdict is an error banner with a line on what to change and a
link to the page that teaches it, and the link works. On the Full Transformer page the
labelled tokens are marked with >= 3:1 contrast against the page, in both themes.

    python -m pytest tests/e2e/test_projector_walk.py -q
"""

from __future__ import annotations

import re

import pytest

from pclab.ui import i18n
from pclab.ui.pages import HOME, PAGES
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, screenshot, wait_for_app

pytestmark = pytest.mark.e2e

PROJECTOR = {"width": 800, "height": 900}
GRAPHIC_CONTRAST = 3.0  # WCAG 1.4.11: a mark that carries meaning, against what surrounds it

# Every element that must fit, with what does not: wider than its own box (scrolled or cut),
# or reaching past the main column's right edge.
CLIPPED = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const edge = main.getBoundingClientRect().right + 1;
  const selectors = ['[data-testid=stTable]', '[data-testid=stTable] table',
    '[data-testid=stVegaLiteChart]', '[data-testid=stVegaLiteChart] canvas',
    '[data-testid=stVegaLiteChart] svg', '[data-testid=stMetric]',
    '[data-testid=stMetric] *', '[data-testid=stAlert]', '[data-testid=stPageLink]',
    '[data-testid=stDataFrame] .dvn-scroller', '[data-testid=stCode] pre',
    '[data-testid=stSelectbox] input'];
  const found = [];
  for (const selector of selectors) {
    for (const el of main.querySelectorAll(selector)) {
      const box = el.getBoundingClientRect();
      if (box.width === 0 || box.height === 0 || el.closest('details:not([open])')) continue;
      const what = `${selector}: ${(el.innerText || '').trim().slice(0, 40)}`;
      if (el.scrollWidth > el.clientWidth + 1 && el.tagName !== 'canvas'
          && getComputedStyle(el).overflowX !== 'visible') {
        found.push(`scrolls or is cut (${el.scrollWidth} > ${el.clientWidth}): ${what}`);
      }
      if (box.right > edge) found.push(`past the main column (${Math.round(box.right)}): ${what}`);
    }
  }
  return found;
}"""
MAIN_WIDTH = (
    "() => document.querySelector('[data-testid=\"stMain\"]').getBoundingClientRect().width"
)
COLLAPSED = "() => document.querySelector('[data-testid=\"stSidebar\"]')?.dataset.collapsed"


@pytest.fixture(scope="module")
def projector(playwright):
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield chromium
    chromium.close()


def open_tab(browser, scheme: str = "dark"):
    context = browser.new_context(viewport=PROJECTOR, locale="zh-CN", color_scheme=scheme)
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    return context, tab


def say(key: str, **values) -> str:
    return i18n.text("zh", key, **values)


def wait_closed(tab) -> None:
    """The room script closes the sidebar a moment after the page has changed."""
    tab.wait_for_function(f"() => ({COLLAPSED})() === 'true'", timeout=10_000)


def by_sidebar(tab, page) -> None:
    """Open the sidebar as a person would, click the page, wait for its title."""
    tab.locator('[data-testid="stExpandSidebarButton"]').click()
    tab.locator('[data-testid="stSidebar"][data-collapsed="false"]').wait_for()
    tab.locator('[data-testid="stSidebarNav"] a', has_text=say(page.title_key)).click()
    title = say(f"{page.key}.title")
    tab.wait_for_function("(t) => document.querySelector('h1')?.innerText.includes(t)", arg=title)
    wait_for_app(tab)


def fits(tab, where: str) -> list[str]:
    width = tab.evaluate(MAIN_WIDTH)
    problems = tab.evaluate(CLIPPED)
    if width < PROJECTOR["width"] - 40:
        problems.append(f"the main column is {width:.0f} px wide")
    return [f"{where}: {p}" for p in problems]


# The verdict table's cells kept on one line by its style (a figure: max |Δ|, the residual).
WHOLE_CELLS = """() => [...document.querySelectorAll('[data-testid="stTable"] td')]
  .filter((td) => getComputedStyle(td).whiteSpace === 'nowrap').map((td) => td.innerText)"""


def copied_figures(tab) -> list[str]:
    """The figures of the verdict table as a reader copies them: each on one line at 800 px,
    and each a number `float()` reads (no word joiner, no non-breaking hyphen in it)."""
    cells = tab.evaluate(WHOLE_CELLS)
    assert cells, "no verdict cell is kept on one line"
    for cell in cells:
        assert not {"\u2060", "\u2011"} & set(cell), repr(cell)
        if cell != say("common.undefined"):
            float(cell.removeprefix("≥ "))
    return cells


def run_failing_check(tab) -> None:
    """Choose the DDP mean-of-local-means example and run the real check."""
    tab.locator('[data-testid="stSelectbox"]').first.click()
    tab.get_by_role("option", name=say("check.example.ddp_mean_of_local_means")).click()
    wait_for_app(tab)
    tab.get_by_role("button", name=say("check.run.button")).click()
    tab.locator('[data-testid="stAlertContentError"]').wait_for(timeout=120_000)
    wait_for_app(tab)


def test_the_projector_walk_through_every_page_by_the_sidebar(projector, app_url):
    context, tab = open_tab(projector)
    problems = []
    try:
        tab.goto(f"{app_url}/?lang=zh")
        wait_for_app(tab)
        wait_closed(tab)
        problems += fits(tab, "home")
        for page in (p for p in PAGES if p is not HOME):
            by_sidebar(tab, page)
            wait_closed(tab)  # after every navigation, not once per tab
            assert "lang=zh" in tab.url
            problems += fits(tab, page.url)
            if page.key == "check":
                run_failing_check(tab)
                copied_figures(tab)
                problems += fits(tab, "check, after a failed run")
                screenshot(tab, "projector-check-failed")
                banner = tab.locator('[data-testid="stAlertContentError"]')
                assert banner.count() == 1
                assert say("check.results.failed", scenarios="")[:8] in banner.inner_text()
                fix = say("check.fix.replica_mean", scenarios="").split("**")[1]
                assert tab.get_by_text(fix).count() == 1  # the line on what to change
                link = say("check.fix.link", page=say("ledger.nav"))
                tab.locator('[data-testid="stPageLink"] a', has_text=link).click()
                tab.wait_for_function(
                    "(t) => document.querySelector('h1')?.innerText.includes(t)",
                    arg=say("ledger.title"),
                )
                wait_for_app(tab)
                assert "lang=zh" in tab.url and tab.evaluate(COLLAPSED) == "true"
        assert problems == []
    finally:
        context.close()


def label_mark_contrast(tab) -> float:
    """The labelled tokens' underline against the page behind it (WCAG contrast)."""
    colours = tab.evaluate(
        """() => {
        const mark = document.querySelector('.pcl-label');
        const app = document.querySelector('.stApp');
        return [getComputedStyle(mark).borderBottomColor, getComputedStyle(app).backgroundColor];
    }"""
    )
    mark, page = ([int(x) for x in re.findall(r"\d+", c)[:3]] for c in colours)
    return contrast(mark, page)


def contrast(a, b) -> float:
    def luminance(rgb):
        c = [x / 255 for x in rgb]
        c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_the_labelled_tokens_stand_out_in_both_themes(projector, app_url, scheme):
    context, tab = open_tab(projector, scheme)
    try:
        tab.goto(f"{app_url}/experiment?lang=zh")
        wait_for_app(tab)
        assert tab.locator(".pcl-label").count() == 3  # window 2 has no label by default
        ratio = label_mark_contrast(tab)
        assert ratio >= GRAPHIC_CONTRAST, f"{scheme}: the labels' mark has {ratio:.2f}:1"
        captions = tab.locator('[data-testid="stCaptionContainer"]').all_inner_texts()
        assert not [c for c in captions if re.search(r"· (en|zh)，", c)]  # documents in words
    finally:
        context.close()
