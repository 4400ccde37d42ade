"""Streamlit helpers every page shares: language, translated errors, number formatting,
and the "show the code" expander. Pages stay thin: widgets -> core -> these helpers."""

from __future__ import annotations

import html
import inspect
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache

import streamlit as st

from core.validation import InvalidInput
from ui import deeplink, i18n

LANG_KEY = "lang"
WORKSHOP_KEY = "workshop"


def _preferred_language() -> str:
    """Before the switch has rendered: `?lang=` from the URL, else the browser locale."""
    wanted = st.query_params.get(LANG_KEY)
    if wanted in i18n.LANGUAGES:
        return wanted
    return i18n.language_from_locale(getattr(st.context, "locale", None))


def language_switch() -> str:
    """Sidebar language radio, carried in the URL as `?lang=en|zh`.

    It is rendered by each page (through `header`), not by app.py: Streamlit 1.67 drops
    the first interaction with a widget that lives in the navigation entry script.
    """
    return deeplink.choice(
        st.sidebar.radio,
        "Language / 语言",
        i18n.LANGUAGES,
        key=LANG_KEY,
        default=_preferred_language(),
        format_func=lambda code: {"en": "English", "zh": "中文"}[code],
        always_in_url=True,
        horizontal=True,
    )


def lang() -> str:
    value = st.session_state.get(LANG_KEY)
    return value if value in i18n.LANGUAGES else _preferred_language()


def t(key: str, **values: object) -> str:
    return i18n.text(lang(), key, **values)


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


def error_message(exc: Exception) -> str:
    """The user's-language message for a core input error."""
    if isinstance(exc, InvalidInput):
        rule = t(f"errors.rule.{exc.rule}")
        if exc.detail:
            rule = f"{rule} ({exc.detail})"
        return t("errors.invalid", field=exc.field, value=exc.value, rule=rule)
    if isinstance(exc, TypeError):
        return t("errors.not_a_number", detail=str(exc))
    return t("errors.cannot_use", detail=str(exc))


@contextmanager
def guard() -> Iterator[None]:
    """Show a core ValueError / TypeError as a translated `st.error`, never a traceback."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        st.error(error_message(exc), icon=":material/error:")


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


def share_button() -> None:
    """A button that copies the page's current address. Every input is carried in the URL
    (see ui.deeplink), so the browser's own location *is* the scenario: reading it at click
    time, rather than rebuilding it on the server, keeps it exact."""
    label, done = json.dumps(t("common.copy_link")), json.dumps(t("common.copied"))
    # Inline handlers are stripped by Streamlit's sanitiser; a script may bind one.
    st.html(
        f"""<button class="pcl-share" type="button" title={label}
        style="font:inherit;font-size:0.85rem;padding:0.25rem 0.7rem;border-radius:0.5rem;
        border:1px solid rgba(49,51,63,0.2);background:transparent;cursor:pointer"
        >{html.escape(t("common.copy_link"))}</button>
        <script>
        document.querySelectorAll("button.pcl-share:not([data-bound])").forEach((button) => {{
            button.dataset.bound = "1";
            button.addEventListener("click", () =>
                navigator.clipboard.writeText(window.location.href).then(() => {{ button.textContent = {done}; }}));
        }});
        </script>""",
        unsafe_allow_javascript=True,
    )


def header(section: str) -> None:
    """Language switch, then the page title, a share button and the lead paragraph."""
    language_switch()
    st.sidebar.toggle(t("exercise.workshop_mode"), key=WORKSHOP_KEY, bind="query-params")
    st.title(t(f"{section}.title"))
    share_button()
    st.markdown(t(f"{section}.lead"))
