"""Streamlit helpers every page shares: language, translated errors, number formatting,
the page header (with the notice for a link's unusable values) and the "show the code"
expander. Pages stay thin: widgets -> core -> these helpers."""

from __future__ import annotations

import inspect
import math
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache

import streamlit as st

from pclab.core.validation import InvalidInput, NotANumber
from pclab.ui import browser, deeplink, i18n, room_panel

LANG_KEY = "lang"
# The language last shown, in a plain session key: Streamlit clears a widget's key when the
# page changes (and a sidebar link drops the URL's ?lang=), so the radio alone forgets it.
CHOSEN_LANG_KEY = "lang_chosen"
WORKSHOP_KEY = "workshop"


def _preferred_language() -> str:
    """Before the switch has rendered: `?lang=` from the URL (a shared link), else the
    language this session already uses, else the browser locale."""
    for wanted in (st.query_params.get(LANG_KEY), st.session_state.get(CHOSEN_LANG_KEY)):
        if wanted in i18n.LANGUAGES:
            return wanted
    return i18n.language_from_locale(getattr(st.context, "locale", None))


def language_switch() -> str:
    """Sidebar language radio, carried in the URL as `?lang=en|zh`.

    It is rendered by each page (through `header`), not by app.py: Streamlit 1.67 drops
    the first interaction with a widget that lives in the navigation entry script.
    """
    chosen = deeplink.choice(
        st.sidebar.radio,
        "Language / 语言",
        i18n.LANGUAGES,
        key=LANG_KEY,
        default=_preferred_language(),
        format_func=lambda code: {"en": "English", "zh": "中文"}[code],
        always_in_url=True,
        horizontal=True,
    )
    st.session_state[CHOSEN_LANG_KEY] = chosen
    return chosen


def lang() -> str:
    value = st.session_state.get(LANG_KEY)
    return value if value in i18n.LANGUAGES else _preferred_language()


def t(key: str, **values: object) -> str:
    return i18n.text(lang(), key, **values)


def coded_choice(
    widget, label_key: str, options, *, key: str, default: str, labels: str, **kwargs
) -> str:
    """A choice carried in the URL by its option code (ui.deeplink.choice), labelled from the
    catalogue: the widget at `label_key`, each option at f"{labels}{code}"."""
    return deeplink.choice(
        widget,
        t(label_key),
        options,
        key=key,
        default=default,
        format_func=lambda code: t(f"{labels}{code}"),
        **kwargs,
    )


def fmt(value: float | int | None, digits: int = 6) -> str:
    """A figure for display. `None` reads "undefined" - never 0, never NaN or inf."""
    if value is None:
        return t("common.undefined")
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return t("common.undefined")
    if value != 0 and not 1e-4 <= abs(value) < 1e9:
        return f"{value:+.{digits}g}"  # 1.7e+308 or 2.2e-16, not 300 digits or a rounded 0
    text = f"{value:+.{digits}f}".rstrip("0").rstrip(".")
    return "0" if text in ("+0", "-0") else text


_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")  # every ASCII punctuation character
# Where Streamlit's Markdown would find a web or e-mail address in plain text (it links
# "https://…", "www.…" and "name@host.…" after the text is parsed, escaped or not).
_ADDRESS = re.compile(r"(?i)(?<=:)(?=/)|(?<=www)(?=\.)|(?=@)")
WORD_JOINER = "\u2060"  # invisible, and no line break: the text reads the same


def plain(text: object) -> str:
    """`text` as text, never markup, wherever Streamlit renders Markdown (a warning, an
    error, a caption), so a visitor's value (a link's parameter, a rejected input) cannot
    open a link, an image, a colour, a code span, an HTML tag or a formula. Every ASCII
    punctuation character is written as its numeric character reference (`&#58;` for ":"),
    which Markdown shows as that character and never reads as markup; an invisible word
    joiner inside "://", "www." and before "@" keeps an address from being linked; line
    breaks are shown as ⏎."""
    text = _ADDRESS.sub(WORD_JOINER, str(text).replace("\r", "").replace("\n", " ⏎ "))
    return _PUNCTUATION.sub(lambda match: f"&#{ord(match[0])};", text)


def _shown_value(value: object) -> str:
    """The offending value in the reader's terms: a cleared cell is "empty", not nan."""
    if value is None or value == "None" or (isinstance(value, float) and math.isnan(value)):
        return t("errors.empty_cell")
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    if isinstance(value, int) and abs(value) >= 10**15:  # a total beyond float64: its size
        return f"≈ 10^{len(str(abs(value))) - 1}"
    if isinstance(value, int | float):
        return str(value)
    return plain(str(value)[:80])  # a text or a grid: whatever it holds stays text


def _rule(exc: InvalidInput, names: dict[str, str]) -> str:
    """The rule in the reader's language, with its detail: a coded one from the catalogue
    (a field it names shown as the reader sees it), else core's own (numbers, shapes)."""
    rule = t(f"errors.rule.{exc.rule}")
    if exc.code:
        values = {
            k: names.get(v, v) if isinstance(v, str) else v for k, v in exc.detail_values.items()
        }
        return f"{rule} ({t(f'errors.detail.{exc.code}', **values)})"
    return f"{rule} ({plain(exc.detail)})" if exc.detail else rule


def error_message(exc: Exception, names: dict[str, str] | None = None) -> str:
    """The user's-language message for a core input error, from its codes (never from its
    English text).

    `names`: core field -> what the reader sees (a table's column header, an input's
    label). A table cell is named by its column and row (r0·k1), and an emptied cell is
    called empty rather than shown as nan. The row comes from the error's cell, or from
    `table_row()` around a per-row core call.
    """
    names = names or {}
    if isinstance(exc, InvalidInput):
        rule = _rule(exc, names)
    elif isinstance(exc, NotANumber):
        rule = t("errors.rule.finite")
    elif isinstance(exc, TypeError):
        return t("errors.not_a_number", detail=plain(exc))
    elif isinstance(exc, ArithmeticError):  # float64 ran out where core did not foresee it
        return t("errors.cannot_use", detail=t("errors.detail.overflow"))
    else:
        return t("errors.cannot_use", detail=plain(exc))
    row, field = exc.table_row, exc.name
    if len(exc.cell) == 2:
        row = f"r{exc.cell[0]}·k{exc.cell[1]}"
    elif exc.cell:
        field = exc.field  # "targets[1]": no table row to name it by
    label = names.get(exc.field, names.get(field, field))
    shown = {"field": label, "value": _shown_value(exc.value), "rule": rule}
    if row is None:
        return t("errors.invalid", **shown)
    return t("errors.invalid_cell", row=row, **shown)


@contextmanager
def table_row(row: str) -> Iterator[None]:
    """Tag a core input error raised inside with the table row it came from (r0·k1)."""
    try:
        yield
    except (InvalidInput, NotANumber) as exc:  # the errors whose message names a row
        exc.table_row = row
        raise


@contextmanager
def guard(names: dict[str, str] | None = None) -> Iterator[None]:
    """Show what core raises (ValueError, TypeError; an OverflowError it did not foresee) as
    a translated `st.error`, never a traceback.
    `names`: core field -> the column header or input label the reader sees."""
    try:
        yield
    except (ValueError, TypeError, ArithmeticError) as exc:
        st.error(error_message(exc, names), icon=":material/error:")


@cache
def _source(function: Callable) -> str:
    """Read once per process: getsource re-reads and re-parses the file (~6 ms a rerun)."""
    return inspect.getsource(function)


def show_code(*functions: Callable) -> None:
    """Expander with the source of the core functions that computed this page's figures."""
    with st.expander(t("common.show_code"), icon=":material/code:"):
        for function in functions:
            st.caption(f"`{function.__module__}.{function.__qualname__}`")
            st.code(_source(function), language="python")


# This script run's slot for the link notice, and whether it is a visit's first run (a
# session's script runs happen one at a time, on the session's script thread).
_RUN = threading.local()


def _cut(raw: str, limit: int = 40) -> str:
    return raw if len(raw) <= limit else f"{raw[:limit]}…"


def _show_link_notice(found: list[tuple[str, str, object]]) -> None:
    def used(value: object) -> str:
        if value is None:
            return t("common.link.preset")
        if isinstance(value, bool):
            return t("common.yes") if value else t("common.no")
        return fmt(value) if isinstance(value, float) else str(value)

    items = i18n.join(
        lang(),
        [f"{plain(key)}={plain(_cut(raw))} → {plain(used(value))}" for key, raw, value in found],
        "clauses",
    )
    _RUN.slot.warning(t("common.link.unusable", items=items), icon=":material/link_off:")


def link_notice() -> None:
    """After the page's widgets (at the end of the run, or before a workshop gate stops it):
    name each value of the visit's link the page could not use, and what it shows instead."""
    if not getattr(_RUN, "first_of_visit", False):  # later runs show what the first found
        return
    if found := deeplink.unusable():
        _show_link_notice(found)


def header(section: str, *, share: bool = True) -> None:
    """Language switch, then the page title, a share button (for a page with a scenario to
    share), a notice when the link asked for values the page cannot use, and the lead."""
    _RUN.first_of_visit = deeplink.start_visit(section)
    deeplink.drop_extremes()
    language_switch()
    room_panel.arrive(WORKSHOP_KEY, section)  # a live room's link: before the workshop toggle
    st.sidebar.toggle(t("exercise.workshop_mode"), key=WORKSHOP_KEY, bind="query-params")
    room_panel.sidebar(t, bool(st.session_state.get(WORKSHOP_KEY)), lang(), section)
    ranges = ("between", "at_least", "at_most", "outside", "error", "press_enter")
    browser.room_support({k: t(f"common.range.{k}") for k in ranges}, t("runs.stopped"))
    st.title(t(f"{section}.title"))
    if share:
        texts = {k: t(f"common.share.{k}") for k in ("field", "copied_here", "copy_yourself")}
        browser.share_button(texts | {"label": t("common.copy_link"), "copied": t("common.copied")})
    _RUN.slot = st.empty()
    if not _RUN.first_of_visit and (found := st.session_state.get(deeplink.FOUND_KEY)):
        _show_link_notice(found)  # what the visit's first run found, kept while on the page
    st.markdown(t(f"{section}.lead"))
