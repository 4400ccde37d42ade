"""ui.figures.fmt: what a figure looks like on screen (no Streamlit run needed for numbers)."""

import pytest

from pclab.ui import figures, language, link_notice


@pytest.fixture(autouse=True)
def english(monkeypatch):
    monkeypatch.setattr(language, "lang", lambda: "en")


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
    assert figures.fmt(value) == shown


def test_the_link_notice_without_a_header_shows_nothing():
    """A run that rendered no header reserved no place: the notice is skipped, no
    AttributeError (the run's state has defaults), and nothing is read from the link."""
    link_notice.link_notice()
    link_notice.link_notice()  # a second call in the same run: still nothing
