"""The "Frameworks, measured" page in a real browser, as a phone-sized visitor in the dark
theme reaches it: choose Chinese in the sidebar, open the page from the sidebar, press Run on
the default Accelerate row (a real trainer check through the server's warm pool) and read the
measured verdict; press it again and get the stored result, the verdict unchanged.

    python -m pytest tests/e2e/test_frameworks_page.py -q
"""

from __future__ import annotations

import pytest

from pclab.experiments.trainer_check.hf_recorded import installed_version
from pclab.ui import i18n
from tests.e2e.conftest import screenshot, wait_for_app

pytestmark = pytest.mark.e2e

NARROW = {"width": 420, "height": 900}
ROW = "accelerate_accumulate"  # the fastest framework check (~0.6 s through the pool)


def say(key: str, **values) -> str:
    return i18n.text("zh", key, **values)


def open_sidebar(tab) -> None:
    tab.locator('[data-testid="stExpandSidebarButton"]').click()
    tab.locator('[data-testid="stSidebar"][data-collapsed="false"]').wait_for()


@pytest.mark.timeout(420)
def test_run_a_framework_row_twice_on_a_narrow_dark_page(browser, app_url):
    if installed_version("accelerate") is None:
        pytest.skip("accelerate is not installed: its row cannot run here")
    context = browser.new_context(viewport=NARROW, locale="en-US", color_scheme="dark")
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    try:
        tab.goto(app_url)
        wait_for_app(tab)
        open_sidebar(tab)
        tab.locator('[data-testid="stSidebar"] label', has_text="中文").click()
        wait_for_app(tab)
        if tab.locator('[data-testid="stSidebar"][data-collapsed="false"]').count() == 0:
            open_sidebar(tab)
        nav = tab.locator('[data-testid="stSidebarNav"] a', has_text=say("frameworks.nav"))
        nav.click()
        tab.wait_for_function(
            "(t) => document.querySelector('h1')?.innerText.includes(t)",
            arg=say("frameworks.title"),
        )
        wait_for_app(tab)
        assert "lang=zh" in tab.url
        row = tab.locator(f".st-key-fw_row_{ROW}")
        verdict = row.get_by_text(say("check.verdict.different"))
        here = say("frameworks.measured_here", package="", version="", torch="").split(" ")[0]
        stored = say("runs.cached", label="", seconds=0).split("：")[0]

        row.get_by_role("button", name=say("frameworks.run"), exact=True).click()
        row.get_by_text(here).wait_for(timeout=240_000)  # measured here, replacing the record
        wait_for_app(tab)
        assert verdict.count() == 1
        screenshot(tab, "frameworks-zh-dark-narrow-run")

        row.get_by_role("button", name=say("frameworks.run"), exact=True).click()
        row.get_by_text(stored).wait_for(timeout=60_000)  # the second press: the stored result
        wait_for_app(tab)
        assert verdict.count() == 1 and row.get_by_text(here).count() == 1
        assert tab.locator('[data-testid="stException"]').count() == 0
        width = tab.evaluate("() => document.documentElement.scrollWidth")
        assert width <= NARROW["width"], f"the page scrolls sideways: {width} px"
    finally:
        context.close()
