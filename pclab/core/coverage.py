"""Section 07's coverage matrix: what the experiments vary against what they compare.

Pure bookkeeping, no torch: it takes measured evidence and returns the matrix. One piece
of evidence is one (scenario row, comparison column) measurement from one source:

    correct_diff   |split computation - single-device reference| of the correct
                   implementation (None: not a finite number)
    slip_diff      the same for a deliberately wrong implementation (None: not finite;
                   absent when the source did not run one)
    tolerance      the absolute tolerance the comparison used

A cell is only evidence when the correct implementation passes AND the comparison
catches the slip: a check that a wrong implementation also passes proves nothing.

    status      correct within tolerance?   slip caught?
    evidence    yes                         yes (outside tolerance or not finite)
    blind       yes                         no  (this comparison cannot see that slip here)
    passed      yes                         no slip was run
    broken      no                          -   (the implementation under test is wrong)
    not_run     no evidence in this session

Evidence from the real two-process Transformer run enters the same way: that experiment's
own code (experiments/transformer/coverage.py) turns its report into Evidence; core never
reads a run's output.

Run: python -c "from pclab.core.coverage import *; print(coverage_matrix([]).cells)"
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pclab.core import validation as v

ROWS = (
    "unequal_lengths",
    "empty_label_replica",
    "tail_batch",
    "repeated_tokens",
    "non_divisible",
    "accumulation_window",
)
COLUMNS = ("loss", "gradients", "global_norm", "parameters")
STATUSES = ("evidence", "blind", "passed", "broken", "not_run")
SOURCES = ("in_process", "torchrun")


@dataclass(frozen=True)
class Evidence:
    row: str
    column: str
    source: str
    correct_diff: float | None
    tolerance: float
    slip_diff: float | None = None
    slip_run: bool = False  # False: no wrong implementation was measured


@dataclass(frozen=True)
class Cell:
    status: str
    correct_diff: float | None = None
    slip_diff: float | None = None
    tolerance: float | None = None


@dataclass(frozen=True)
class CoverageMatrix:
    source: str
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    cells: dict[tuple[str, str], Cell]
    blind_rows: tuple[str, ...]  # measured rows where no comparison caught the slip
    uncovered_columns: tuple[str, ...]  # columns with no evidence cell at all
    broken: tuple[tuple[str, str], ...]  # cells where the correct implementation failed
    complete: bool  # every cell measured, nothing broken, every column has evidence


def within(diff: float | None, tolerance: float) -> bool:
    """A measured gap passes when it is a finite number no larger than the tolerance."""
    return diff is not None and math.isfinite(diff) and abs(diff) <= tolerance


def cell_status(evidence: Evidence | None) -> str:
    """The status of one cell (see the module table).

    Args: an Evidence (tolerance finite >= 0, each gap a number or None) or None (not run).
    """
    if evidence is None:
        return "not_run"
    if not isinstance(evidence, Evidence):
        raise TypeError(f"evidence={evidence!r} is not an Evidence record")
    v.non_negative(evidence.tolerance, "tolerance")
    for field in ("correct_diff", "slip_diff"):  # None or a number; inf and NaN are "not finite"
        if getattr(evidence, field) is not None:
            v.number(getattr(evidence, field), field)
    if not within(evidence.correct_diff, evidence.tolerance):
        return "broken"
    if not evidence.slip_run:
        return "passed"
    return "blind" if within(evidence.slip_diff, evidence.tolerance) else "evidence"


def _checked(item: Evidence, rows: tuple[str, ...], columns: tuple[str, ...]) -> Evidence:
    if not isinstance(item, Evidence):
        raise TypeError(f"evidence={item!r} is not an Evidence record")
    v.choice(item.row, "row", rows)
    v.choice(item.column, "column", columns)
    v.choice(item.source, "source", SOURCES)
    v.non_negative(item.tolerance, "tolerance")
    return item


def coverage_matrix(
    evidence: Iterable[Evidence],
    source: str = "in_process",
    rows: Iterable[str] = ROWS,
    columns: Iterable[str] = COLUMNS,
) -> CoverageMatrix:
    """Fill the rows x columns matrix from the evidence of one source.

    Args:
        evidence: Evidence records; records of other sources are ignored, and a later
            record for the same cell replaces an earlier one.
        source: which source's matrix to build (one of SOURCES).
    Returns:
        A CoverageMatrix: every cell's status, the rows whose slip went unseen in every
        column, the columns no row gave evidence for, and the broken cells.
    Raises:
        ValueError naming the value for an unknown row, column, source or a negative
        tolerance; TypeError for a record that is not an Evidence.
    """
    source = v.choice(source, "source", SOURCES)
    row_names, column_names = tuple(rows), tuple(columns)
    found: dict[tuple[str, str], Evidence] = {}
    for record in evidence:
        item = _checked(record, row_names, column_names)
        if item.source == source:
            found[(item.row, item.column)] = item
    cells = {}
    for row in row_names:
        for column in column_names:
            got = found.get((row, column))
            cells[(row, column)] = Cell(
                cell_status(got),
                None if got is None else got.correct_diff,
                None if got is None else got.slip_diff,
                None if got is None else got.tolerance,
            )

    def statuses(row: str) -> list[str]:
        return [cells[(row, c)].status for c in column_names]

    blind_rows = tuple(
        r
        for r in row_names
        if "blind" in statuses(r) and not {"evidence", "broken"} & set(statuses(r))
    )
    uncovered = tuple(
        c for c in column_names if all(cells[(r, c)].status != "evidence" for r in row_names)
    )
    broken = tuple(key for key, cell in cells.items() if cell.status == "broken")
    complete = (
        not broken and not uncovered and all(cell.status != "not_run" for cell in cells.values())
    )
    return CoverageMatrix(
        source, row_names, column_names, cells, blind_rows, uncovered, broken, complete
    )
