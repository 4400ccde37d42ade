"""Page 10 · Across updates on a projector (issue 44): 800 x 900, Chinese, the dark theme. The
real run goes twice - a ÷K loop (a failed verdict whose diagnosis names the tail, in Chinese,
beside core's prediction) and then the correct loop (the same update at every update) - each
through the server's warm pool, and the tail exercise is revealed and graded. Nothing on the
page is cut or wider than the main column before, between and after.

    python -m pytest -n 0 tests/e2e/test_across_updates.py -q
"""

from __future__ import annotations

import pytest

from pclab.ui import i18n
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS, screenshot, wait_for_app
from tests.e2e.test_projector_walk import PROJECTOR, fits

pytestmark = pytest.mark.e2e

RUN_TIMEOUT_MS = 240_000  # a cold pool on a busy 2-core box; a warm run takes seconds
DARK = "() => getComputedStyle(document.querySelector('.stApp')).backgroundColor"


def say(key: str, **values) -> str:
    return i18n.text("zh", key, **values)


@pytest.fixture(scope="module")
def tab(playwright):
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    context = chromium.new_context(viewport=PROJECTOR, locale="zh-CN", color_scheme="dark")
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()
    chromium.close()


def run_and_wait(tab, banner: str, text: str) -> None:
    """Press Run, wait for the banner of the verdict that holds `text`, then for the page."""
    tab.get_by_role("button", name=say("across.run.button")).click()
    alert = tab.locator(f'[data-testid="stAlertContent{banner}"]', has_text=text)
    alert.first.wait_for(timeout=RUN_TIMEOUT_MS)
    wait_for_app(tab)


def test_two_real_runs_and_a_revealed_exercise_at_800_px_in_chinese_and_dark(tab, app_url):
    tab.goto(f"{app_url}/across-updates?lang=zh")
    wait_for_app(tab)
    assert _is_dark(tab)
    assert tab.locator("h1").first.inner_text().startswith(say("across.nav"))
    problems = fits(tab, "across-updates")

    # 1. the ÷K loop (the page's default): different, and the tail is named in Chinese
    failed = i18n.catalogue("zh")["across.run.failed"].split("{")[0]
    run_and_wait(tab, "Error", failed)
    main = tab.locator('[data-testid="stMain"]').inner_text()
    assert say("check.scenario.uneven") in main and "尾窗口" in main
    assert say("across.run.tail_check", predicted="0.5", measured="0.5").replace("**", "") in main
    assert tab.locator('[data-testid="stVegaLiteChart"]').count() >= 5  # + the gap and the rate
    problems += fits(tab, "after the ÷K run")
    screenshot(tab, "across-updates-divide-by-k")

    # 2. the correct loop: the same update everywhere
    tab.get_by_text(say("across.run.loops.correct"), exact=True).click()
    wait_for_app(tab)
    run_and_wait(tab, "Success", say("across.run.passed"))
    assert "acr_loop=correct" in tab.url
    problems += fits(tab, "after the correct run")

    # 3. predict, then reveal: the ÷K tail of the preset epoch is 0.5 of the correct update
    field = tab.get_by_label(say("exercise.your_prediction")).first
    field.fill("0.5")
    field.press("Enter")
    wait_for_app(tab)
    tab.get_by_role("button", name=say("exercise.reveal")).first.click()
    right = say("exercise.right", answer="0.5")
    tab.locator('[data-testid="stAlertContentSuccess"]', has_text=right).wait_for()
    wait_for_app(tab)
    problems += fits(tab, "after the reveal")
    screenshot(tab, "across-updates-correct-revealed")
    assert tab.locator('[data-testid="stException"]').count() == 0
    assert problems == []


def _is_dark(tab) -> bool:
    red, green, blue = (int(x) for x in tab.evaluate(DARK).strip("rgba()").split(",")[:3])
    return red + green + blue < 3 * 80
