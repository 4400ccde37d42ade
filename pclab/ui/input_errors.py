"""A refused input as the reader's-language message: built from core's codes (field, table
cell, rule, detail code and values; `core.validation`), never from an exception's English
text, and shown as an `st.error` instead of a traceback (`guard`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from pclab.core.validation import DamagedFile, InvalidInput, NotANumber
from pclab.ui.language import t
from pclab.ui.plain_text import plain


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
    (a field it names shown as the reader sees it); an uncoded one only when it holds no
    word (a range "0..7", a shape "(2, 3)"), since its words would be core's English."""
    rule = t(f"errors.rule.{exc.rule}")
    if exc.code:
        values = {
            k: names.get(v, v) if isinstance(v, str) else v for k, v in exc.detail_values.items()
        }
        return f"{rule} ({t(f'errors.detail.{exc.code}', **values)})"
    if exc.detail and not any(char.isalpha() for char in exc.detail):
        return f"{rule} ({plain(exc.detail)})"
    return rule


def error_message(exc: Exception, names: dict[str, str] | None = None) -> str:
    """The user's-language message for a core input error, from its codes and the catalogue
    alone: no message includes an exception's English text (`str(exc)`, an uncoded detail
    with words). A damaged artifact of the lab's is named by its file. An error without
    codes (a TypeError such as None * 2 from an empty value, a plain ValueError) gets the
    catalogue's general sentence for its kind.

    `names`: core field -> what the reader sees (a table's column header, an input's
    label). A table cell is named by its column and row (r0·k1), and an emptied cell is
    called empty rather than shown as nan. The row comes from the error's cell, or from
    `table_row()` around a per-row core call.
    """
    names = names or {}
    if isinstance(exc, DamagedFile):  # the lab's own file, not the reader's input
        return t("errors.damaged_file", file=plain(exc.file))
    if isinstance(exc, InvalidInput):
        rule = _rule(exc, names)
    elif isinstance(exc, NotANumber):
        rule = t("errors.rule.finite")
    elif isinstance(exc, TypeError):
        return t("errors.not_a_number")
    elif isinstance(exc, ArithmeticError):  # float64 ran out where core did not foresee it
        return t("errors.cannot_use", detail=t("errors.detail.overflow"))
    else:
        return t("errors.unusable")
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
