"""ui.page.fmt: what a figure looks like on screen (no Streamlit run needed for numbers)."""

import pytest

from pclab.ui import page


@pytest.fixture(autouse=True)
def english(monkeypatch):
    monkeypatch.setattr(page, "lang", lambda: "en")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.4, "+0.4"),
        (-0.5, "-0.5"),
        (0.0, "0"),
        (-0.0, "0"),
        (3, "3"),
        (None, "undefined"),
        (float("nan"), "undefined"),
        (float("inf"), "undefined"),
        (1.7e308, "+1.7e+308"),
        (2.2e-16, "+2.2e-16"),
        (1 / 3, "+0.333333"),
    ],
)
def test_fmt(value, shown):
    assert page.fmt(value) == shown
