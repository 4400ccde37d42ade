"""URL state for choice widgets, so a shared link reopens the same scenario in any language.

Numbers and checkboxes use Streamlit's own `bind="query-params"`. Choice widgets cannot:
a bound radio writes its *displayed* label into the URL, and our labels are translated, so
`?ledger_scheme=副本均值再平均` would break when the reader's language differs. `choice()`
keeps the language-neutral option code in the URL instead (`?ledger_scheme=replica_mean`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st


def _initial(key: str, options: Sequence[str], default: str) -> str:
    """The value a new widget starts from: the URL's option code, else the default.

    It is passed as the widget's initial value rather than written into session state:
    Streamlit's page-change cleanup can drop a key's state for one rerun, and seeding it
    then would overwrite the choice the user just clicked.
    """
    wanted = st.query_params.get(key)
    return wanted if wanted in options else default


def _to_url(key: str, value: str | None, default: str | None) -> None:
    """Mirror the choice into the URL; the default is left out to keep links short."""
    if value is None or value == default:
        st.query_params.pop(key, None)
    else:
        st.query_params[key] = value


def choice(
    widget: Callable[..., str | None],
    label: str,
    options: Sequence[str],
    *,
    key: str,
    default: str,
    format_func: Callable[[str], str],
    always_in_url: bool = False,
    **kwargs: object,
) -> str:
    """Render `widget` (st.radio, st.selectbox, st.segmented_control, or a container's)
    with its value carried in the URL as the option code; returns the chosen code.

    `always_in_url` keeps the parameter even at its default - for the language, whose
    default depends on the reader's browser, so a link must always say which it means.
    """
    start = _initial(key, options, default)
    if widget.__name__ == "segmented_control":
        kwargs["default"] = start
    else:
        kwargs["index"] = list(options).index(start)
    value = widget(label, options, key=key, format_func=format_func, **kwargs)
    if value is None:  # a segmented control can be cleared: fall back to the default
        value = default
    _to_url(key, value, None if always_in_url else default)
    return value
