"""Input checks shared by every public core function.

Core functions validate at the entry and raise `InvalidInput` (a `ValueError`) naming
the offending value and a rule code. Pages translate the rule code through the
catalogue (`errors.rule.<code>`), so a Chinese reader gets a Chinese message while a
notebook user still gets a plain English `ValueError`. A value that is not a number
at all raises `TypeError`, as Python itself would.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

# Rule codes -> the English text used in the exception message. The catalogue holds
# the same codes under errors.rule.* in each language (a test checks they match).
RULES = {
    "finite": "a finite number",
    "non_negative_int": "a whole number >= 0",
    "positive_int": "a whole number >= 1",
    "positive": "a finite number > 0",
    "non_negative": "a finite number >= 0",
    "rectangular": "a non-empty rectangular grid (the same length in every row)",
    "same_shape": "the matching shape",
    "one_of": "one of the allowed choices",
    "non_empty": "a non-empty sequence",
    "in_range": "a value inside the allowed range",
}


class InvalidInput(ValueError):
    """A ValueError that names the value, its field and the rule it broke."""

    def __init__(self, field: str, value: object, rule: str, detail: str = "") -> None:
        self.field = field
        self.value = value
        self.rule = rule
        self.detail = detail
        expected = RULES[rule] + (f" ({detail})" if detail else "")
        super().__init__(f"{field}={value!r} is invalid: expected {expected}")


def number(value: object, field: str) -> float:
    """Return `value` as a float; TypeError when it is not a real number."""
    if type(value) is float:  # the common case, spared the slow isinstance(value, Real)
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{field}={value!r} is not a number")
    try:
        return float(value)
    except OverflowError:  # an int beyond float64, such as 10**400
        raise InvalidInput(field, value, "finite") from None


def finite(value: object, field: str) -> float:
    x = number(value, field)
    if not math.isfinite(x):
        raise InvalidInput(field, value, "finite")
    return x


def positive(value: object, field: str) -> float:
    x = number(value, field)
    if not (math.isfinite(x) and x > 0):
        raise InvalidInput(field, value, "positive")
    return x


def non_negative(value: object, field: str) -> float:
    x = number(value, field)
    if not (math.isfinite(x) and x >= 0):
        raise InvalidInput(field, value, "non_negative")
    return x


def count(value: object, field: str, *, minimum: int = 0) -> int:
    """A whole-number count. Floats that are exact integers (2.0) are accepted,
    because table widgets hand back floats; 2.5, NaN and negatives are not."""
    if type(value) is int and value >= minimum:  # the common case, spared the ABC checks
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{field}={value!r} is not a number")
    rule = "non_negative_int" if minimum == 0 else "positive_int"
    if isinstance(value, Integral):
        n = int(value)
    else:
        x = float(value)
        if not math.isfinite(x) or x != int(x):
            raise InvalidInput(field, value, rule)
        n = int(x)
    if n < minimum:
        raise InvalidInput(field, value, rule)
    return n


def choice(value: object, field: str, allowed: tuple[str, ...]) -> str:
    try:
        known = value in allowed
    except (TypeError, ValueError):  # e.g. a numpy array, whose == is elementwise
        known = False
    if not known:
        raise InvalidInput(field, value, "one_of", ", ".join(map(str, allowed)))
    return value  # type: ignore[return-value]


def grid(rows: object, field: str) -> list[list[object]]:
    """Check a nested [replica][microstep] sequence is non-empty and rectangular."""
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
        raise InvalidInput(field, rows, "rectangular")
    rows = [
        list(r) if hasattr(r, "__len__") and not isinstance(r, (str, bytes)) else r for r in rows
    ]
    if not rows or any(not isinstance(r, list) for r in rows):
        raise InvalidInput(field, rows, "rectangular")
    width = len(rows[0])
    if width == 0 or any(len(r) != width for r in rows):
        raise InvalidInput(field, rows, "rectangular")
    return rows


def finite_result(value: float, field: str, inputs: object) -> float:
    """A computed figure that overflowed float64 is refused, never shown as inf or NaN."""
    if not math.isfinite(value):
        raise InvalidInput(field, inputs, "in_range", "the result overflows float64")
    return value


def _plain_counts(row: list[object]) -> bool:
    """Every cell a plain int >= 0: `count` would return each unchanged."""
    return all(type(v) is int and v >= 0 for v in row)


def _plain_finite(row: list[object]) -> bool:
    """Every cell a plain finite float: `finite` would return each unchanged."""
    return all(type(v) is float and math.isfinite(v) for v in row)


def count_grid(rows: object, field: str = "counts") -> tuple[tuple[int, ...], ...]:
    cells = grid(rows, field)
    # Rows of plain ints skip the per-cell call and its field name (a 1024 x 64 grid: 3x
    # faster); any other row takes the full check, so results and errors are unchanged.
    return tuple(
        tuple(row)
        if _plain_counts(row)
        else tuple(count(v, f"{field}[{r}][{k}]") for k, v in enumerate(row))
        for r, row in enumerate(cells)
    )


def finite_grid(rows: object, field: str, shape: tuple[int, int]) -> tuple[tuple[float, ...], ...]:
    cells = grid(rows, field)
    if (len(cells), len(cells[0])) != shape:
        raise InvalidInput(field, rows, "same_shape", f"{shape[0]}x{shape[1]}")
    return tuple(
        tuple(row)
        if _plain_finite(row)
        else tuple(finite(v, f"{field}[{r}][{k}]") for k, v in enumerate(row))
        for r, row in enumerate(cells)
    )
