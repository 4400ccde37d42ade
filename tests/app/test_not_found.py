"""An address that is no page of the lab gets the lab's own page in the reader's language
(ui.not_found), not Streamlit's English "Page not found" dialog. The browser side (the dialog
absent, the address kept) is tests/e2e/test_pages_read_well.py.

    python -m pytest tests/app/test_not_found.py -q
"""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pclab.ui import i18n, not_found
from pclab.ui.not_found import page_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("url", "base", "name"),
    [
        ("http://127.0.0.1:8501/nope", "", "nope"),
        ("http://127.0.0.1:8501/nope/", "", "nope"),
        ("http://127.0.0.1:8501", "", ""),  # the home page
        ("http://127.0.0.1:8501/", "", ""),
        ("http://lab.example/lab/nope", "lab", "nope"),  # behind a base path
        ("http://lab.example/lab", "/lab/", ""),
        ("http://127.0.0.1:8501/%E4%BD%A0", "", "你"),  # as Streamlit compares it: decoded
        # On a rerun st.context.url trims a known page's name from the end and appends the
        # current page's: "/xledger" reads "/x/xledger", "/你" reads "/%E4%BD%A0/你".
        ("http://127.0.0.1:8501/x/xledger", "", "xledger"),
        ("http://127.0.0.1:8501/%E4%BD%A0/你", "", "你"),
    ],
)
def test_page_name_is_what_the_navigation_looks_up(url, base, name):
    assert page_name(url, base) == name


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("asked", ["nope", "home", "denominator", ""])
def test_the_navigation_takes_any_address(monkeypatch, asked, lang):
    """An unknown address adds the hidden page; "home" (the file's name, which Streamlit would
    reserve for the root page had app.py not given it the pathname "") among them."""
    monkeypatch.setattr(not_found, "requested_page", lambda: asked)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["lang"] = lang
    at.run()
    assert not at.exception, at.exception
    assert at.title[0].value == i18n.text(lang, "home.title")  # AppTest opens the root page
