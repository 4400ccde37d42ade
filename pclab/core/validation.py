"""Input checks shared by every public core function.

Core functions validate at the entry and raise `InvalidInput` (a `ValueError`) naming
the offending value and carrying codes: the field, the table cell (replica, microstep),
the rule and, for a rule with more to say, a detail code with its values. Pages translate
the codes through the catalogue (`errors.rule.<rule>`, `errors.detail.<code>`), so a Chinese
reader gets a Chinese message while a notebook user still gets a plain English `ValueError`.
A value that is not a number at all raises `NotANumber`, a `TypeError` as Python itself
would raise, with the same codes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import TypeGuard

# The largest total a count grid may reach: N = sum of counts must convert to float64 (a
# Python int does not overflow, but G / N and P / N then raise OverflowError).
MAX_COUNT = int(1.7976931348623157e308)

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
# Detail codes -> the English text (formatted with the error's detail values). The catalogue
# holds the same codes under errors.detail.* (a test checks they match).
DETAILS = {
    "overflow": "the result overflows float64",
    "up_to": "0..{high} ({of})",
}


def _full_name(field: str, cell: tuple[int, ...]) -> str:
    """ "grad_sums" and (0, 1) -> "grad_sums[0][1]", as a notebook user indexes it."""
    return field + "".join(f"[{i}]" for i in cell)


class InvalidInput(ValueError):
    """A ValueError that names the value, its field and the rule it broke.

    Codes for a reader in any language: `name` (the field without indices), `cell` (its
    indices: (replica, microstep) in a grid), `rule` (a RULES key), `code` (a DETAILS key or
    "") with `detail_values`. `field` and `detail` are the English ones (`field` with the
    indices, "grad_sums[0][1]"); `detail` may be free English text when there is no code.
    `table_row` is set by a caller that knows which row of its table the value came from.
    """

    table_row: str | None = None

    def __init__(
        self,
        field: str,
        value: object,
        rule: str,
        detail: object = "",
        *,
        cell: tuple[int, ...] = (),
        code: str = "",
        **detail_values: object,
    ) -> None:
        self.name, self.cell = field, tuple(cell)
        self.field = _full_name(field, self.cell)
        self.value = value
        self.rule = rule
        self.code = code
        self.detail_values = detail_values
        self.detail = (
            str(detail) if detail != "" else DETAILS[code].format(**detail_values) if code else ""
        )
        expected = RULES[rule] + (f" ({self.detail})" if self.detail else "")
        super().__init__(f"{self.field}={value!r} is invalid: expected {expected}")


class DamagedFile(ValueError):
    """One of the lab's own files is missing or not what it was released as (not the reader's
    input): `file` names it, relative to the package, so a page can say which in its own
    words."""

    def __init__(self, file: str, message: str) -> None:
        super().__init__(message)
        self.file = file


class NotANumber(TypeError):
    """A TypeError for a value that is not a real number, with the field's codes (and
    `table_row`, as for InvalidInput)."""

    table_row: str | None = None

    def __init__(self, field: str, value: object, *, cell: tuple[int, ...] = ()) -> None:
        self.name, self.cell = field, tuple(cell)
        self.field = _full_name(field, self.cell)
        self.value = value
        super().__init__(f"{self.field}={value!r} is not a number")


def number(value: object, field: str, cell: tuple[int, ...] = ()) -> float:
    """Return `value` as a float; NotANumber (a TypeError) when it is not a real number."""
    if type(value) is float:  # the common case, spared the slow isinstance(value, Real)
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        raise NotANumber(field, value, cell=cell)
    try:
        return float(value)
    except OverflowError:  # an int beyond float64, such as 10**400
        raise InvalidInput(field, value, "finite", cell=cell) from None


def finite(value: object, field: str, cell: tuple[int, ...] = ()) -> float:
    x = number(value, field, cell)
    if not math.isfinite(x):
        raise InvalidInput(field, value, "finite", cell=cell)
    return x


def positive(value: object, field: str) -> float:
    x = number(value, field)
    if not (math.isfinite(x) and x > 0):
        raise InvalidInput(field, value, "positive")
    return x


def non_negative(value: object, field: str, cell: tuple[int, ...] = ()) -> float:
    x = number(value, field, cell)
    if not (math.isfinite(x) and x >= 0):
        raise InvalidInput(field, value, "non_negative", cell=cell)
    return x


def count(value: object, field: str, *, minimum: int = 0, cell: tuple[int, ...] = ()) -> int:
    """A whole-number count. Floats that are exact integers (2.0) are accepted,
    because table widgets hand back floats; 2.5, NaN and negatives are not."""
    if type(value) is int and value >= minimum:  # the common case, spared the ABC checks
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        raise NotANumber(field, value, cell=cell)
    rule = "non_negative_int" if minimum == 0 else "positive_int"
    if isinstance(value, Integral):
        n = int(value)
    else:
        x = float(value)
        if not math.isfinite(x) or x != int(x):
            raise InvalidInput(field, value, rule, cell=cell)
        n = int(x)
    if n < minimum:
        raise InvalidInput(field, value, rule, cell=cell)
    return n


def flag(value: object, field: str) -> bool:
    """A bool, as it is (1 and "yes" are refused: a flag is True or False)."""
    if not isinstance(value, bool):
        raise InvalidInput(field, value, "one_of", "True or False")
    return value


def choice(value: object, field: str, allowed: tuple[str, ...]) -> str:
    try:
        known = value in allowed
    except (TypeError, ValueError):  # e.g. a numpy array, whose == is elementwise
        known = False
    if not known:
        raise InvalidInput(field, value, "one_of", ", ".join(map(str, allowed)))
    return value  # type: ignore[return-value]  # in `allowed`: one of its strings


def _sequence(value: object) -> TypeGuard[Iterable[object]]:
    """A sized collection other than text: a grid row, or the grid itself."""
    return hasattr(value, "__len__") and not isinstance(value, (str, bytes))


def grid(rows: object, field: str) -> list[list[object]]:
    """Check a nested [replica][microstep] sequence is non-empty and rectangular."""
    if not _sequence(rows):
        raise InvalidInput(field, rows, "rectangular")
    cells = [list(r) if _sequence(r) else r for r in rows]
    lists = [r for r in cells if isinstance(r, list)]
    if not cells or len(lists) != len(cells):
        raise InvalidInput(field, cells, "rectangular")
    width = len(lists[0])
    if width == 0 or any(len(r) != width for r in lists):
        raise InvalidInput(field, lists, "rectangular")
    return lists


def finite_or_none(value: object) -> float | None:
    """A number as a float; None when missing, not a number or not finite (undefined, never 0)."""
    try:
        x = float(value) if isinstance(value, Real) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer beyond float64
        x = math.nan
    return x if math.isfinite(x) else None


def finite_result(value: float, field: str, inputs: object) -> float:
    """A computed figure that overflowed float64 is refused, never shown as inf or NaN."""
    if not math.isfinite(value):
        raise InvalidInput(field, inputs, "in_range", code="overflow")
    return value


def _plain_counts(row: list[object]) -> TypeGuard[list[int]]:
    """Every cell a plain int >= 0: `count` would return each unchanged."""
    return all(type(v) is int and v >= 0 for v in row)


def _plain_finite(row: list[object]) -> TypeGuard[list[float]]:
    """Every cell a plain finite float: `finite` would return each unchanged."""
    return all(type(v) is float and math.isfinite(v) for v in row)


def count_grid(rows: object, field: str = "counts") -> tuple[tuple[int, ...], ...]:
    cells = grid(rows, field)
    # Rows of plain ints skip the per-cell call and its field name (a 1024 x 64 grid: 3x
    # faster); any other row takes the full check, so results and errors are unchanged.
    counts: tuple[tuple[int, ...], ...] = tuple(
        tuple(row)
        if _plain_counts(row)
        else tuple(count(v, field, cell=(r, k)) for k, v in enumerate(row))
        for r, row in enumerate(cells)
    )
    total = sum(map(sum, counts))
    if total > MAX_COUNT:  # beyond float64 a figure divided by N overflows (OverflowError)
        raise InvalidInput(field, total, "in_range", code="overflow")
    return counts


def finite_grid(rows: object, field: str, shape: tuple[int, int]) -> tuple[tuple[float, ...], ...]:
    cells = grid(rows, field)
    if (len(cells), len(cells[0])) != shape:
        raise InvalidInput(field, rows, "same_shape", f"{shape[0]}x{shape[1]}")
    return tuple(
        tuple(row)
        if _plain_finite(row)
        else tuple(finite(v, field, (r, k)) for k, v in enumerate(row))
        for r, row in enumerate(cells)
    )
