"""Every page under hostile input: never a traceback, never NaN or inf shown as a figure, and
a translated `st.error` where the input is bad.

Values reach a page the ways a visitor can send them: widget state (set here through
session_state, as the browser would send it - Streamlit itself refuses NaN and inf for a
number input and out-of-range values for a bounded one, which is checked too), a deep link's
query parameters, and data-editor cells (a cleared cell arrives as NaN; a crafted request can
carry a negative or huge number past the column's client-side minimum).

Per page and profile, every number input and slider is pushed to the same extreme at once:
"high" (its maximum, or 1e308 when unbounded), "low" (its minimum, or -1e308), "tiny"
(5e-324 where unbounded and float) and "zero".
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from pclab.ui import i18n

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(f"pclab/sections/{p.name}" for p in (ROOT / "pclab" / "sections").glob("*.py"))
BAD_FIGURE = re.compile(r"(?i)(?<![a-z])(nan|[+-]?inf(inity)?)(?![a-z])")
PROFILES = ("high", "low", "tiny", "zero")
pytestmark = pytest.mark.timeout(240)


def open_page(page: str, lang: str = "en") -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.session_state["lang"] = lang
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def invalid_input_errors(at: AppTest, lang: str = "en") -> list[str]:
    """The st.error messages that report a refused input (errors.* in the catalogue)."""
    heads = [i18n.text(lang, k).split("{")[0] for k in ("errors.invalid", "errors.not_a_number")]
    return [e.value for e in at.error if any(e.value.startswith(h) for h in heads)]


def shown_figures(at: AppTest) -> set[str]:
    """Every metric value and table cell (interactive or static) that reads NaN or inf (or
    holds an infinite float)."""
    found = set()
    for metric in at.metric:
        if BAD_FIGURE.search(str(metric.value)):
            found.add(f"metric {metric.label} = {metric.value}")
    for frame in [*at.dataframe, *at.table]:  # interactive and static tables
        data = frame.value.data if hasattr(frame.value, "data") else frame.value  # a Styler's frame
        if not isinstance(data, pd.DataFrame):
            continue
        for column in data.columns:
            for cell in data[column]:
                if (
                    isinstance(cell, float)
                    and math.isinf(cell)
                    or isinstance(cell, str)
                    and BAD_FIGURE.search(cell)
                ):
                    found.add(f"{column} = {cell!r}")
    return found


def assert_sound(at: AppTest, context: str, baseline: set[str] = frozenset()) -> None:
    """No exception, and no NaN or inf shown that the page's default render did not show
    (the coordinated-step page's injected inf, the sources page's "found-inf flag")."""
    assert not at.exception, f"{context}: {at.exception}"
    assert shown_figures(at) - baseline == set(), context


def numeric_specs(at: AppTest) -> dict[str, tuple]:
    """key -> (min, max, is_int) of every enabled number input and numeric slider, read once:
    a widget that a later run does not draw (after an error) can no longer be read."""
    widgets = list(at.number_input) + [s for s in at.slider if isinstance(s.value, int | float)]
    return {
        w.key: (w.min, w.max, isinstance(w.value, int) and not isinstance(w.value, bool))
        for w in widgets
        if w.key and not w.disabled
    }


def extreme(spec: tuple, profile: str):
    """The profile's value for one number input or slider, or None to leave it alone."""
    low, high, is_int = spec
    if profile == "high":
        return high if high is not None else (10**18 if is_int else 1e308)
    if profile == "low":
        return low if low is not None else (-(10**18) if is_int else -1e308)
    if profile == "tiny":
        return 5e-324 if low is None and not is_int else None
    if low is not None and low > 0 or high is not None and high < 0:
        return None
    return 0 if is_int else 0.0


@pytest.mark.parametrize("page", PAGES)
def test_extremes_never_break_a_page(page):
    at = open_page(page)
    baseline, specs = shown_figures(at), numeric_specs(at)
    for profile in PROFILES:
        for key, spec in specs.items():
            value = extreme(spec, profile)
            if value is not None:
                at.session_state[key] = value
        at.run()
        assert_sound(at, f"{page} {profile}", baseline)
    unbounded = [k for k, (low, _, is_int) in specs.items() if low is None and not is_int]
    for bad in (math.nan, math.inf, -math.inf):  # refused by the widget itself, when drawn
        drawn = {w.key for w in at.number_input}
        for key in set(unbounded) & drawn:
            at.session_state[key] = bad
        at.run()
        assert_sound(at, f"{page} {bad}", baseline)
        shown = {w.key: w.value for w in at.number_input}  # an input after an error may be gone
        for key in set(unbounded) & set(shown):
            assert shown[key] is None or math.isfinite(shown[key]), (
                f"{page}: {key} holds {shown[key]}"
            )


@pytest.mark.parametrize("page", PAGES)
def test_hostile_deep_links_are_ignored_or_refused(page):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.run()
    at.switch_page(page).run()
    baseline = shown_figures(at)
    keys = [w.key for w in at.get("number_input")] + [w.key for w in at.get("slider")]
    keys += [w.key for w in at.get("selectbox")] + [w.key for w in at.get("segmented_control")]
    hostile = (
        "nan",
        "-inf",
        "1e999",
        "-1e308",
        "99999999999999999999999",
        "<script>alert(1)</script>",
        "",
    )
    for i, key in enumerate(k for k in keys if k):
        at.query_params[key] = hostile[i % len(hostile)]
    at.query_params["lang"] = "xx"
    at.run()
    assert_sound(at, f"{page} deep link", baseline)


# Inputs a page must refuse with a translated error, named in the reader's terms: (page,
# session_state updates, catalogue key of the column or input label the error must name,
# the table row it must name or None). A cleared cell is called empty, never nan.
BAD = [
    (
        "pclab/sections/01_denominator.py",
        {"den_windows": {"edited_rows": {0: {"positions": None}}}},
        "denominator.col_positions",
        "r0·k0",
    ),
    (
        "pclab/sections/01_denominator.py",
        {"den_windows": {"edited_rows": {1: {"prompt": -5}}}},
        "denominator.col_prompt",
        "r0·k1",
    ),
    (
        "pclab/sections/01_denominator.py",
        {"den_windows": {"edited_rows": {2: {"loss_sum": None}}}},
        "denominator.col_loss_sum",
        "r1·k0",
    ),
    (
        "pclab/sections/03_framework.py",
        {"fw_table": {"edited_rows": {0: {"n": -1}}}},
        "framework.col_count",
        "r0·k0",
    ),
    (
        "pclab/sections/03_framework.py",
        {"fw_table": {"edited_rows": {1: {"grad_sum": None}}}},
        "framework.col_grad_sum",
        "r0·k1",
    ),
    (
        "pclab/sections/03_framework.py",
        {"fw_table": {"edited_rows": {0: {"weight_sum": -3.0}}}},
        "framework.col_weight_sum",
        "r0·k0",
    ),
    ("pclab/sections/08_clipping.py", {"clip_threshold": -1.0}, "clipping.threshold", None),
    ("pclab/sections/08_clipping.py", {"clip_scale": 0.0}, "clipping.scale", None),
    (
        "pclab/sections/09_coordinated_step.py",
        {"step_threshold": -1e308},
        "clipping.threshold",
        None,
    ),
    ("pclab/sections/09_coordinated_step.py", {"step_scale": -2.0}, "clipping.scale", None),
]


def cleared_cell(updates: dict) -> bool:
    """Whether the updates clear a data-editor cell (the browser sends None)."""
    edits = [v for change in updates.values() if isinstance(change, dict) for v in change.values()]
    return any(
        value is None
        for rows in edits
        if isinstance(rows, dict)
        for row in rows.values()
        for value in row.values()
    )


@pytest.mark.parametrize(
    "page, updates, label, row", BAD, ids=[f"{p[6:-3]}-{f}" for p, _, f, _ in BAD]
)
def test_bad_input_gets_a_translated_error(page, updates, label, row):
    at = open_page(page)
    baseline = shown_figures(at)
    for key, value in updates.items():
        if key.endswith(("_windows", "_table")):
            value = {"edited_rows": {}, "added_rows": [], "deleted_rows": [], **value}
        at.session_state[key] = value
    at.run()
    # Then the same refusal in Chinese. (The language goes last: a later AppTest run would
    # re-send the radios' labels in the language the test thread formats them in.)
    for lang in ("en", "zh"):
        if lang == "zh":
            at.session_state["lang"] = "zh"
            at.run()
        assert_sound(at, f"{page} {updates} {lang}", baseline)
        errors = invalid_input_errors(at, lang)
        assert errors, f"{page} {updates}: no input error shown ({[e.value for e in at.error]})"
        named = [e for e in errors if i18n.text(lang, label) in e and (row is None or row in e)]
        assert named, errors
        assert not any(BAD_FIGURE.search(e) for e in errors), errors  # "empty cell", not nan
        if cleared_cell(updates):
            assert any(i18n.text(lang, "errors.empty_cell") in e for e in named), named
        if lang == "zh":
            assert all(re.search(r"[\u4e00-\u9fff]", e) for e in errors), errors
