"""URL state for choice widgets, so a shared link reopens the same scenario in any language.

Numbers and checkboxes use Streamlit's own `bind="query-params"`. Choice widgets cannot:
a bound radio writes its *displayed* label into the URL, and our labels are translated, so
`?ledger_scheme=副本均值再平均` would break when the reader's language differs. `choice()`
keeps the language-neutral option code in the URL instead (`?ledger_scheme=replica_mean`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import streamlit as st

# Session keys: the page whose link was last checked, the link's parameters as it arrived,
# and the unusable ones found (kept for the whole visit to the page).
VISIT_KEY, LINK_KEY, FOUND_KEY = "deeplink_visit", "deeplink_link", "deeplink_unusable"
REFUSED_KEY = "deeplink_tables_refused"  # tables whose link value did not fit, this visit
HELD_KEY = "deeplink_held"  # those values, for a choice whose option code they are (once)
DROPPED_KEY = "deeplink_dropped"  # parameters removed as unreadable (empty, beyond float64)
LAST_KEY = "deeplink_last"  # each page's parameters as its last run left them, this session
# Every page's (the language, workshop mode, the live room): nothing of a page's own inputs.
SHARED_PARAMS = ("lang", "workshop", "room", "seat", "host")
LABELS_KEY = "deeplink_labels"  # each choice's label as last drawn (a language switch changes it)


def _initial(key: str, options: Sequence[str], default: str) -> str:
    """The value a new widget starts from: the URL's option code, else the default.

    It is passed as the widget's initial value rather than written into session state:
    Streamlit's page-change cleanup can drop a key's state for one rerun, and seeding it
    then would overwrite the choice the user just clicked.
    """
    wanted = st.query_params.get(key)
    held = st.session_state.get(HELD_KEY, {})
    if wanted is None and key in held:
        # "inf" and "nan" are option codes too (page 09's injection): `drop_unreadable` took
        # them out of the URL as numbers before any widget ran, and held them for a choice
        wanted = held.pop(key)
    if wanted is None or wanted not in options:
        return default
    return wanted


def _to_url(key: str, value: str | None, default: str | None) -> None:
    """Mirror the choice into the URL; the default is left out to keep links short. A value
    the URL already holds is not written again: each write reaches the browser, which records
    a changed address as a history entry of its own (Back would stay on the page)."""
    if value is None or value == default:
        st.query_params.pop(key, None)
    elif st.query_params.get(key) != value:
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
    drawn = st.session_state.setdefault(LABELS_KEY, {})
    start_label = format_func(start)
    relabelled = key in st.session_state and drawn.get(key, start_label) != start_label
    if relabelled:
        # The reader switched language: the browser holds the old label as the widget's value
        # (a selectbox's value travels as its label), which the new labels cannot read back,
        # and it would keep showing it. Setting the state sends the choice with the new labels.
        st.session_state[key] = start
    if widget.__name__ == "segmented_control":
        kwargs["default"] = None if relabelled else start
    else:
        kwargs["index"] = 0 if relabelled else list(options).index(start)
    value = widget(label, options, key=key, format_func=format_func, **kwargs)
    if value is None:  # a segmented control can be cleared: fall back to the default
        value = default
    drawn[key] = format_func(value) if value in options else None
    _to_url(key, value, None if always_in_url else default)
    return value


MAX_CELL_CHARS = 32  # "-1.7976931348623157e+308" and its separator, with room to spare

# --- tables -----------------------------------------------------------------------------
# A data editor cannot be bound to the URL, so its editable columns travel as one compact
# parameter: rows joined by "_", cells by "~" (`?den_table=96~0~30~0~138.6_96~50~...`).


def _encode(frame, columns: Sequence[str]) -> str:
    def cell(value) -> str:
        return "" if value is None or value != value else f"{float(value):g}"  # NaN: a cleared cell

    return "_".join(
        "~".join(cell(v) for v in row) for row in frame[list(columns)].itertuples(index=False)
    )


def _decode(raw: str, rows: int, columns: Sequence[str]) -> list[list[float | None]] | None:
    """The URL's cells, or None when they do not fit this table (then the link is ignored).
    A value longer than any table of this shape could write is refused unread."""
    if len(raw) > rows * len(columns) * MAX_CELL_CHARS:
        return None
    try:
        cells = [[None if c == "" else float(c) for c in row.split("~")] for row in raw.split("_")]
    except ValueError:
        return None
    if len(cells) != rows or any(len(row) != len(columns) for row in cells):
        return None
    return cells


def table(key: str, preset, columns: Sequence[str]):
    """The data to hand `st.data_editor`: on a session's first render the URL's values (when
    they fit the preset's shape), else the preset. It is held in session state, so the data
    stays the same across reruns and the editor keeps its own edits on top of it."""
    held_key = f"{key}_base"
    held = st.session_state.get(held_key)
    if held is None or held[0] != preset.shape:
        base = preset.copy()
        raw = st.query_params.get(key) if held is None else None
        cells = _decode(raw, len(base), columns) if raw else None
        if cells is not None:
            base[list(columns)] = cells
        elif raw:  # the link's table does not fit (garbled, or another shape): say so
            st.session_state[REFUSED_KEY] = [*st.session_state.get(REFUSED_KEY, ()), key]
        st.session_state[held_key] = (preset.shape, base)
    return st.session_state[held_key][1]


def table_to_url(key: str, edited, preset, columns: Sequence[str]) -> None:
    """Mirror the edited table into the URL; the preset itself is left out."""
    encoded = _encode(edited, columns)
    if encoded == _encode(preset, columns):
        st.query_params.pop(key, None)
    else:
        st.query_params[key] = encoded


# --- links that ask for what a page cannot show --------------------------------------------
# Streamlit drops a bound widget's URL value it cannot use (garbled, not an option) and clamps
# one out of range; `choice()` and `table()` fall back to the default. Each would be silent,
# so the page's first run compares what the link asked for with what the widgets now hold.
def _remember(page: str, arriving: bool) -> None:
    """Keep the page's parameters as this run starts (the URL the last run left), and give
    them back to a bare return to the page: the browser's Back, or the sidebar, arrives with
    the language only (Streamlit drops a page's parameters when another page opens), and every
    input and the kept result of a Run would fall back to their defaults. Only on arrival: a
    reader who sets the defaults again (they leave the URL) keeps them."""
    last = st.session_state.setdefault(LAST_KEY, {})
    if arriving and set(st.query_params) <= set(SHARED_PARAMS) and last.get(page):
        for key, value in last[page].items():
            if key not in SHARED_PARAMS:
                st.query_params[key] = value
    last[page] = {k: st.query_params.get(k) for k in st.query_params}


def start_visit(page: str) -> bool:
    """Called before any widget: on the first run of a visit to `page`, keep the link's
    parameters as they arrived (a bare return gets the page's last ones back). Returns True on
    that first run."""
    if st.session_state.get(VISIT_KEY) == page:
        _remember(page, arriving=False)
        return False
    _remember(page, arriving=True)
    st.session_state[VISIT_KEY] = page
    st.session_state[LINK_KEY] = {k: st.query_params.get(k) for k in st.query_params}
    st.session_state[FOUND_KEY] = []
    st.session_state[REFUSED_KEY] = []
    st.session_state[DROPPED_KEY] = []
    return True


def _beyond_float64(raw: str) -> bool:
    """A number no widget of the lab can hold: inf, -inf, NaN, 1e309, 5000 nines. Streamlit
    would hand it to int() or float() while registering a bound widget and stop the page."""
    try:
        return not math.isfinite(float(raw))
    except (ValueError, OverflowError):
        return False  # not a number at all: a choice's code or a table, checked where used


def _empty(raw: str) -> bool:
    """`?chk_world_size=`: Streamlit reads an empty value as a cleared widget and hands the
    page None, even from a control that requires a value (a page then multiplies None)."""
    return not raw.strip()


def drop_unreadable() -> None:
    """Remove from the URL, before any widget reads it, each value no widget of the lab can
    use: an empty one, or a number beyond float64. The widget then starts from its default,
    and `unusable()` names the link's value in the page's notice (the visit's link was kept
    by `start_visit`)."""
    raws = {key: st.query_params.get(key) or "" for key in st.query_params}
    extremes = [key for key, raw in raws.items() if _beyond_float64(raw)]
    unreadable = [*extremes, *(key for key, raw in raws.items() if _empty(raw))]
    if not unreadable:
        return
    held = {key: raws[key] for key in extremes}  # an empty value is no option's code
    # st.query_params refuses to delete a widget's bound parameter, and bound widgets are
    # seeded from the URL as the run found it: so the session's own query parameters drop
    # the value and re-take that copy (as Streamlit does after a page change, to drop another
    # page's parameters). Streamlit 1.67's runtime API; the hostile-link tests pin it.
    from streamlit.runtime.state import get_session_state

    with get_session_state().query_params() as params:
        for key in unreadable:
            params.remove_param(key)
        params.set_initial_query_params_from_current()
    st.session_state[DROPPED_KEY] = [*st.session_state.get(DROPPED_KEY, ()), *unreadable]
    st.session_state[HELD_KEY] = {**st.session_state.get(HELD_KEY, {}), **held}


def _same(raw: str, value: object) -> bool:
    if isinstance(value, bool):
        return raw.strip().lower() == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return math.isclose(float(raw), float(value), rel_tol=1e-9, abs_tol=1e-12)
        except ValueError:
            return False
    return raw == str(value)


def unusable() -> list[tuple[str, str, object]]:
    """(parameter, value in the link, value the page uses instead; None for a table's
    preset) for each parameter of the visit's link the page could not use, among the
    widgets rendered so far. Kept in the session for the rest of the visit."""
    link = st.session_state.get(LINK_KEY) or {}
    refused = st.session_state.get(REFUSED_KEY, [])
    dropped = st.session_state.get(DROPPED_KEY, [])  # a table's, when no widget holds it
    refused = [*refused, *(k for k in dropped if k not in st.session_state)]
    found: list[tuple[str, str, object]] = [
        (key, raw, None) for key, raw in link.items() if key in refused
    ]
    for key, raw in link.items():
        if key in st.session_state and key not in refused:
            value = st.session_state[key]
            if raw is not None and not _same(raw, value):
                found.append((key, raw, value))
    st.session_state[FOUND_KEY] = found
    return found


def last_parameters(page: str) -> dict[str, str]:
    """The parameters of `page`'s own inputs as its last run this session left them (what
    `_remember` would give back to a bare return), for a link to it to carry."""
    last = st.session_state.get(LAST_KEY, {}).get(page) or {}
    return {k: v for k, v in last.items() if k not in SHARED_PARAMS and v is not None}
