"""A link is the one thing a stranger controls before any click: every page under a hostile
link keeps its title, names what it could not use, and renders nothing the link wrote.

Every URL-bound key of every page (each widget that reads the URL, and the tables carried in
one parameter) is given, in turn:
- markup: a Markdown link, an image, a colour directive, HTML, a code span, a bare web
  address. The page's text elements (Markdown source, as AppTest holds it) may echo the value
  only escaped: no unescaped link, image, colour, tag, backtick or web address in them. The
  browser test (tests/e2e/test_hostile_links.py) checks the same on the rendered page;
- numbers beyond float64 or beyond reason: inf, -inf, NaN, 1e309, 5000 digits, a parameter
  repeated 2000 times, a table of 100 000 cells. No exception element, no generic error, the
  page's title, and the link notice naming the key;
- an empty value (`?chk_world_size=`): dropped with the notice, the page as without it (its
  buttons, its errors, the widget's value);
- bidi overrides and other format characters: the notice holds none of them.
"""

from __future__ import annotations

import html
import re
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from pclab.ui import i18n
from pclab.ui.pages import PAGES
from pclab.ui.plain_text import WORD_JOINER

ROOT = Path(__file__).resolve().parents[2]
WIDGETS = ("number_input", "slider", "selectbox", "segmented_control", "radio", "toggle")
WIDGETS += ("checkbox", "select_slider", "multiselect")
UNSENT = ("lang", "workshop")  # the language (tests of its own), home's toggle (see fresh)
TABLES = ("den_table", "fw_cells")  # deeplink.table keys: a table in one parameter
MARKER = "zq9x"
MARKUP = (
    f"`[{MARKER}](https://evil.example)`",
    f"![{MARKER}](https://evil.example/a.png)",
    f":red[**{MARKER}**]",
    f"<img src=x onerror=alert(1)>{MARKER}",
    f"`{MARKER}` www.evil.example",
)
# Markup that escaping must have defused, wherever the marker is echoed (a character written
# as a reference, &#58;, or after a backslash is text in CommonMark and Streamlit's directives).
LIVE = {
    "link": re.compile(r"(?<!\\)\]\s*(?<!\\)\("),
    "image": re.compile(r"(?<!\\)!(?<!\\)\["),
    "colour": re.compile(r"(?<!\\):[a-z-]+(?<!\\)\["),
    "tag": re.compile(r"(?<!\\)<[a-z]"),
    "code span": re.compile(r"(?<!\\)`"),
    "web address": re.compile(r"(?<![\\/])www\.|https?(?<!\\):"),
}
GENERIC = ("cannot_use", "not_a_number", "unusable")
PYTHON_WORDS = (
    "NoneType",
    "unsupported operand",
    "Traceback",
    "object is not",
)  # errors that name no field
EXTREMES = ("inf", "-inf", "NaN", "1e309", "-1e309", "9" * 5000, "-" + "9" * 5000)
pytestmark = pytest.mark.timeout(900)


def fresh(page: str, params: dict[str, object]) -> AppTest:
    """A new visitor opening `page` from a link with `params`. (AppTest finds a page with its
    own URL path only after a first run, and then drops the parameters bound on that first
    page, home's `workshop`: the browser test opens a link directly.)"""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.run()
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page(page).run()
    return at


@cache
def bound_keys(page: str) -> tuple[str, ...]:
    """Every key of `page` a link can set: its widgets' keys and its table parameters."""
    at = fresh(page, {})
    keys = {w.key for kind in WIDGETS for w in at.get(kind) if w.key not in (None, *UNSENT)}
    keys = {k for k in keys if not k.endswith("_guess")}  # an exercise's guess: never in a URL
    keys |= {k.removesuffix("_base") for k in at.session_state if k.removesuffix("_base") in TABLES}
    return tuple(sorted(keys))


PAGE_KEYS = [(page.file, key) for page in PAGES for key in bound_keys(page.file)]


def texts(at: AppTest) -> list[str]:
    """The Markdown source of every element that renders Markdown."""
    kinds = ("markdown", "caption", "warning", "error", "info", "success", "title", "subheader")
    return [str(e.value) for kind in kinds for e in at.get(kind)]


def notice(at: AppTest) -> str:
    """The link notice as the reader sees it (character references decoded), or ""."""
    head = i18n.text("en", "common.link.unusable").split("{")[0]
    shown = next((w.value for w in at.warning if w.value.startswith(head)), "")
    return html.unescape(shown).replace(WORD_JOINER, "")


def assert_page_stands(at: AppTest, page: str, context: str) -> None:
    assert not at.exception, f"{context}: {at.exception}"
    said = [str(e.value) for kind in ("error", "warning") for e in at.get(kind)]
    assert not [s for s in said if any(w in s for w in PYTHON_WORDS)], f"{context}: {said}"
    title = i18n.text("en", f"{next(p.key for p in PAGES if p.file == page)}.title")
    assert [t.value for t in at.title][:1] == [title], context
    generic = [i18n.text("en", f"errors.{k}").split("{")[0] for k in GENERIC]
    assert not [e.value for e in at.error if e.value.startswith(tuple(generic))], context


@pytest.mark.parametrize("page", [p.file for p in PAGES])
def test_markup_in_a_link_stays_text(page):
    keys = bound_keys(page)
    for payload in MARKUP:
        at = fresh(page, dict.fromkeys(keys, payload))
        assert_page_stands(at, page, f"{page} {payload}")
        echoed = [text for text in texts(at) if MARKER in text]
        if keys and "check" not in page:  # every page with a key shows the notice
            assert notice(at), f"{page} {payload}: no link notice"
        for text in echoed:
            live = [name for name, pattern in LIVE.items() if pattern.search(text)]
            assert not live, f"{page} {payload}: {live} in {text!r}"


@pytest.mark.parametrize("page", [p.file for p in PAGES])
def test_every_bound_key_beyond_float64_at_once(page):
    keys = bound_keys(page)
    for value in EXTREMES:
        at = fresh(page, dict.fromkeys(keys, value))
        assert_page_stands(at, page, f"{page} {value[:20]}")
        shown = notice(at)
        assert all(key in shown for key in keys), f"{page} {value[:20]}: {shown!r}"


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: each example is a page run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    target=st.sampled_from(PAGE_KEYS),
    value=st.one_of(
        st.sampled_from(EXTREMES),
        st.integers(min_value=10**300, max_value=10**4000).map(str),
        st.just(["inf"] * 2000),  # the parameter repeated: a list
        st.just("~".join(["1e308"] * 5) + "_" * 100_000),  # a table beyond any shape
    ),
)
def test_extreme_numbers_in_any_bound_key_leave_the_page_standing(target, value):
    page, key = target
    at = fresh(page, {key: value})
    assert_page_stands(at, page, f"{page} {key}={str(value)[:60]}")
    # A number beyond float64 or a garbled table is named. (AppTest sends a repeated
    # parameter to no widget; a browser's reaches the page as its last value, "inf".)
    if not isinstance(value, list) and not re.fullmatch(r"\d+", value):
        assert key in notice(at), f"{page} {key}: no notice ({notice(at)!r})"


@pytest.mark.parametrize(
    "page, params",
    [
        ("pclab/sections/01_denominator.py", {"den_replicas": "inf"}),
        ("pclab/sections/02_ledger.py", {"ledger_n_a": "inf"}),
        ("pclab/sections/03_framework.py", {"fw_replicas": "inf"}),
        ("pclab/sections/experiment.py", {"exp_labels0": "inf"}),
        ("pclab/sections/07_validation.py", {"val_size": "inf", "val_sampler_seed": "inf"}),
        ("pclab/sections/04_limits.py", {"lim_seed": "9" * 5000}),
    ],
)
def test_the_issues_links_get_the_pages_notice(page, params):
    at = fresh(page, params)
    assert_page_stands(at, page, str(params))
    for key in params:
        assert key in notice(at), notice(at)


def test_counts_beyond_float64_get_a_translated_refusal():
    """Page 03's table from a link with counts of 1e308: N overflows float64 (an
    OverflowError inside core once); now the page names the column and the reason."""
    cells = "_".join(["1e308~1e308~4"] * 4)
    for lang in ("en", "zh"):
        at = fresh("pclab/sections/03_framework.py", {"fw_cells": cells, "lang": lang})
        assert not at.exception, at.exception
        errors = [e.value for e in at.error]
        wanted = i18n.text(lang, "errors.detail.overflow")
        assert any(wanted in e and i18n.text(lang, "framework.col_count") in e for e in errors), (
            errors
        )


@cache
def as_without_a_link(page: str) -> tuple[object, ...]:
    """What a page holds opened without a link: its buttons, its errors, its keys' values."""
    return shape(fresh(page, {}), bound_keys(page))


def shape(at: AppTest, keys: tuple[str, ...]) -> tuple[object, ...]:
    values = tuple(repr(at.session_state[k]) if k in at.session_state else None for k in keys)
    return tuple(sorted(b.key or b.label for b in at.button)), [e.value for e in at.error], values


@pytest.mark.parametrize("page, key", PAGE_KEYS)
def test_an_empty_value_in_a_link_is_dropped_with_the_notice(page, key):
    """`/check-trainer?chk_world_size=` handed the page None ("This input is not a number:
    unsupported operand type(s) for *: 'NoneType' and 'int'") and took its Run button away:
    now the value is dropped before any widget reads it, the notice names it, and the page is
    the one a link without it opens (buttons, errors, the widget's value)."""
    at = fresh(page, {key: ""})
    assert_page_stands(at, page, f"{page} {key}=")
    assert f"{key}= → " in notice(at), f"{page} {key}=: {notice(at)!r}"
    assert shape(at, bound_keys(page)) == as_without_a_link(page), f"{page} {key}="


def test_an_empty_world_size_then_run_launches_with_the_default(monkeypatch):
    """`/parameters?par_world_size=` then Run said "world_size = empty cell": now the run is
    asked for the default, 2 (a stand-in experiment records it; real launches: tests/runners/)."""
    from pclab.experiments import registry
    from pclab.runners.results import Outcome, RunResult
    from pclab.ui import runs

    real = registry.get("negatives")
    asked = []

    class Recording:  # validated by the real Params, hashed as the real worker
        name, worker, params = real.name, real.worker, real.params

        def run(self, params, progress=None, **_):
            asked.append(params.world_size)
            return RunResult.ended(Outcome.FAILED, "stand-in", 0.1, "x")

    real_get = registry.get
    monkeypatch.setattr(
        registry, "get", lambda name: Recording() if name == "negatives" else real_get(name)
    )
    runs.clear()
    page = "pclab/sections/06_parameters.py"
    at = fresh(page, {"par_world_size": ""})
    at.button(key="par_run").click().run()
    assert_page_stands(at, page, "par_world_size= then Run")
    assert asked == [2]
    runs.clear()


# Bidi embeddings, overrides and isolates, the zero-width characters and word joiners, and the
# byte order mark: Unicode's format characters (category Cf) a link can carry.
FORMAT_CHARACTERS = (
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
    *map(chr, range(0x200B, 0x2010)),
    *map(chr, range(0x2060, 0x2065)),
    "\ufeff",
)


@pytest.mark.parametrize(
    "page, key",
    [
        ("pclab/sections/check_trainer.py", "chk_example"),
        ("pclab/sections/02_ledger.py", "ledger_scheme"),
    ],
)
def test_a_bidi_override_in_a_link_cannot_turn_the_notice_around(page, key):
    """`?chk_example=%E2%80%AEnoitcudorp%20ot%20efas` made the app's own warning read
    "→ safe to production" with the rest reversed: the notice now shows the letters as the
    link spelt them, left to right, and no format character reaches any text element."""
    for mark in FORMAT_CHARACTERS:
        at = fresh(page, {key: f"{mark}noitcudorp ot efas{mark}"})
        assert_page_stands(at, page, f"{key} U+{ord(mark):04X}")
        assert f"{key}=noitcudorp ot efas → " in notice(at), (hex(ord(mark)), notice(at))
        shown = "".join(texts(at)).replace(WORD_JOINER, "")
        assert mark == WORD_JOINER or mark not in shown, hex(ord(mark))
