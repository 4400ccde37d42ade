"""Every registered page in a real browser, from two walks (tests/e2e/page_walk.py): English in
the light theme and Chinese in the dark at 1400 px, the home page opened fresh and every other
page reached by the sidebar, as a reader goes.

- each page renders with no exception box, its title in the page's language, the language
  kept in its address;
- no table scrolls inside its box (its last column hidden);
- every text has at least 4.5:1 contrast against what is behind it (WCAG 1.4.3), in both
  themes (the selected segment, the active tab, a slider's value and the code's colours are
  set for it in pclab/ui/browser.py);
- no page requests anything from a host but the lab's, from the first load on: the favicon is
  the lab's own file, inlined; the Material icons come from the font Streamlit serves.

    python -m pytest tests/e2e/test_every_page.py -q
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

from pclab.ui.pages import PAGES
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.page_walk import Walk, walk_every_page

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
WALKS = {"en": "light", "zh": "dark"}  # language -> theme
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def walks(playwright, app_url):
    """`walks(lang)`: that language's walk, taken the first time a test asks for it."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    taken: dict[str, Walk] = {}

    def walk(lang: str) -> Walk:
        if lang not in taken:
            taken[lang] = walk_every_page(browser, app_url, lang, WALKS[lang], shots=True)
        return taken[lang]

    yield walk
    browser.close()


@pytest.mark.parametrize("lang", WALKS)
def test_every_page_renders_in_the_browser(walks, lang):
    walk = walks(lang)
    assert list(walk.pages) == [page.key for page in PAGES]
    assert {k: p.exceptions for k, p in walk.pages.items() if p.exceptions} == {}
    assert [k for k, p in walk.pages.items() if f"lang={lang}" not in p.address] == []
    if lang == "zh":
        assert [k for k, p in walk.pages.items() if not CJK.search(p.title)] == []
    else:
        assert [k for k, p in walk.pages.items() if not p.title.strip()] == []


def test_no_table_scrolls_at_1400_px(walks):
    found = [f"{k}: {t}" for k, p in walks("en").pages.items() for t in p.scrolling_tables]
    assert found == []


@pytest.mark.parametrize("lang", WALKS)
def test_every_text_has_4_5_to_1_contrast(walks, lang):
    found = [f"{k}: {c}" for k, p in walks(lang).pages.items() for c in p.low_contrast]
    assert found == [], f"{WALKS[lang]}: " + "\n".join(found)


@pytest.mark.parametrize("lang", WALKS)
def test_no_page_load_requests_another_host(walks, app_url, lang):
    walk = walks(lang)
    lab = urlsplit(app_url)
    own = {f"http://{lab.netloc}", f"ws://{lab.netloc}"}
    for key, page in walk.pages.items():
        icon = page.favicon
        assert icon.startswith("data:image/svg+xml") or icon.startswith(app_url), (key, icon)
    assert set(walk.fetched) <= own, sorted(set(walk.fetched) - own)
    assert walk.fetched, "no request was seen at all: the listener is not working"
