"""ui.figures.fmt, ui.plain_text.plain, ui.link_notice: what a figure and a visitor's text look
like on screen, and the notice without a header (no Streamlit run needed)."""

import sys
import unicodedata

import pytest

from pclab.ui import figures, language, link_notice, plain_text


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


# The reference: Unicode's own list of format characters, from the Python running the tests.
EVERY_FORMAT_CHARACTER = [
    chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) == "Cf"
]
NAMED = [  # the ones the issue names, listed by hand so the reference cannot miss them
    *range(0x202A, 0x202F),  # LRE RLE PDF LRO RLO
    *range(0x2066, 0x206A),  # LRI RLI FSI PDI
    *range(0x200B, 0x2010),  # ZWSP ZWNJ ZWJ LRM RLM
    *range(0x2060, 0x2065),  # word joiner, invisible operators
    0xFEFF,  # byte order mark, zero-width no-break space
]


def test_the_reference_holds_every_named_character():
    assert {chr(code) for code in NAMED} <= set(EVERY_FORMAT_CHARACTER)
    assert len(EVERY_FORMAT_CHARACTER) > 150


@pytest.mark.parametrize("mark", EVERY_FORMAT_CHARACTER, ids=lambda c: f"U+{ord(c):04X}")
def test_plain_removes_every_format_character(mark):
    """A bidi override (U+202E) turned "noitcudorp ot efas" into "safe to production" and the
    app's own words after it backwards: plain() keeps the letters and drops the mark."""
    shown = plain_text.plain(f"{mark}noitcudorp{mark} ot efas{mark}")
    assert shown == "noitcudorp ot efas"


def test_plain_keeps_its_own_word_joiner_and_visible_text():
    """The word joiner plain() puts in an address is its own: a visitor's is removed first."""
    shown = plain_text.plain("\u2060www.\u202eexample\u2066 中文 é")
    assert shown == f"www{plain_text.WORD_JOINER}&#46;example 中文 é"
