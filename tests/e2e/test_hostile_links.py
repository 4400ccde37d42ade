"""Links a stranger could share, opened in real Chromium: a Markdown link, an image, a colour
directive or HTML in a URL parameter shows as the literal text it is (in the page's notice
of values it could not use), creates no link, image or styled text, and makes the browser
fetch nothing; a number beyond float64 leaves the page standing with its notice. (That no load
of any registered page requests anything from another host is tests/e2e/test_every_page.py;
tests/app/test_hostile_links.py covers every bound key of every page through AppTest.)"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import pytest

from pclab.ui.plain_text import WORD_JOINER
from tests.e2e.conftest import wait_for_app

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
PAYLOADS = (  # each within the 40 characters the notice shows of a value
    "`[zq9x](https://evil.example)`",
    "zq9x www.evil.example x@evil.example",
    "![zq9x](https://evil.example/a.png)",
    ":red[**zq9x**]",
    "<img src=https://evil.example/b.png>zq9x",
)
# Every payload on the check page; on the other pages the two that would do harm (a live link,
# a fetched image): one helper escapes them all, and AppTest feeds every payload to every
# bound key of every page (tests/app/test_hostile_links.py). A page load here costs ~4 s.
LINKS = {
    "check-trainer?chk_example=": PAYLOADS,
    "ledger?ledger_scheme=": PAYLOADS[:1] + PAYLOADS[2:3],
    "clipping?clip_scale=": PAYLOADS[:1] + PAYLOADS[2:3],
    "denominator?den_table=": PAYLOADS[:1] + PAYLOADS[2:3],
}


def _record_hosts(page) -> list[str]:
    """Every network request the tab makes from now on, as scheme://host:port (a data: or
    blob: URL fetches nothing and is not recorded)."""
    fetched: list[str] = []

    def seen(request) -> None:
        url = urlsplit(request.url)
        if url.scheme not in ("data", "blob"):
            fetched.append(f"{url.scheme}://{url.netloc}")

    page.on("request", seen)
    return fetched


@pytest.mark.parametrize("link", LINKS)
def test_markup_in_a_link_is_shown_as_text(app_url, page, link):
    fetched = _record_hosts(page)
    for payload in LINKS[link]:
        page.goto(f"{app_url}/{link}{quote(payload)}")
        wait_for_app(page)
        alert = page.locator('[data-testid="stAlert"]', has_text="zq9x")
        assert alert.count() == 1, f"{link}{payload}: no notice naming the value"
        shown = alert.inner_text().replace(WORD_JOINER, "")  # the joiners are invisible
        assert payload in shown, shown  # the text, literally
        for made in ("a", "img", "code", "strong", "span[style*=color]"):
            assert alert.locator(made).count() == 0, f"{link}{payload}: a {made} element"
        assert page.locator('a[href*="evil.example"], img[src*="evil.example"]').count() == 0
        assert page.locator('[data-testid="stException"]').count() == 0
    others = {host for host in fetched if urlsplit(host).netloc != urlsplit(app_url).netloc}
    assert not others, sorted(others)  # no fetch from another host


@pytest.mark.parametrize(
    "link",
    ["denominator?den_replicas=inf", "ledger?ledger_n_a=1e309", "limits?lim_seed=" + "9" * 5000],
)
def test_numbers_beyond_float64_leave_the_page_standing(app_url, page, link):
    page.goto(f"{app_url}/{link}")
    wait_for_app(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    key = link.split("?")[1].split("=")[0]
    assert page.locator('[data-testid="stAlert"]', has_text=key).count() == 1
