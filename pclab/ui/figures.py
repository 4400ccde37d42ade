"""A computed figure as the page shows it: signed, trimmed, and "undefined" (in the reader's
language) where core returns None or a non-finite number - never 0, NaN or inf."""

from __future__ import annotations

import math

from pclab.ui.language import t


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


def magnitude(value: float | int | None, digits: int = 6) -> str:
    """An absolute value (a max |Δ|, a spread, a fraction) as `fmt` shows it, without the
    '+' a signed figure carries: "0.00636", not "+0.00636"."""
    return fmt(value, digits).removeprefix("+")
