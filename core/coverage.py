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

Evidence from the real two-process Transformer run enters the same way:
`evidence_from_transformer` maps its report's branches onto the rows and columns it covers.

Run: python -c "from core.coverage import *; print(coverage_matrix([]).cells)"
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core import validation as v

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
    evidence: Iterable[Evidence], source: str = "in_process", rows=ROWS, columns=COLUMNS
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
    rows, columns = tuple(rows), tuple(columns)
    found: dict[tuple[str, str], Evidence] = {}
    for item in evidence:
        item = _checked(item, rows, columns)
        if item.source == source:
            found[(item.row, item.column)] = item
    cells = {}
    for row in rows:
        for column in columns:
            item = found.get((row, column))
            cells[(row, column)] = Cell(
                cell_status(item),
                None if item is None else item.correct_diff,
                None if item is None else item.slip_diff,
                None if item is None else item.tolerance,
            )

    def statuses(row: str) -> list[str]:
        return [cells[(row, c)].status for c in columns]

    blind_rows = tuple(
        r for r in rows if "blind" in statuses(r) and not {"evidence", "broken"} & set(statuses(r))
    )
    uncovered = tuple(c for c in columns if all(cells[(r, c)].status != "evidence" for r in rows))
    broken = tuple(key for key, cell in cells.items() if cell.status == "broken")
    complete = not broken and not uncovered and all(cell.status != "not_run" for cell in cells.values())
    return CoverageMatrix(source, rows, columns, cells, blind_rows, uncovered, broken, complete)


# The real two-process Transformer run (runners.transformer): which of its branches is a
# row's correct computation and which its slip. Every run accumulates two microbatches; a
# padded (non-full) tail window is the tail; the DDP branches cover a row only when the
# run's labels give the ranks that situation.
TRANSFORMER_BRANCHES = {
    "accumulation_window": ("accum_global_n", "accum_microbatch_mean"),
    "tail_batch": ("accum_global_n", "accum_microbatch_mean"),
    "unequal_lengths": ("ddp_pn_scale", "ddp_mean_of_means"),
    "empty_label_replica": ("ddp_pn_scale", "ddp_mean_of_means"),
}
TRANSFORMER_COLUMNS = ("loss", "parameters")  # the gaps its report gives as numbers


def _records(report: object, key: str, fields: tuple[str, ...]) -> list[Mapping]:
    """report[key] as a list of records, each holding `fields`; ValueError naming it otherwise."""
    if not isinstance(report, Mapping):
        raise TypeError(f"report={report!r} is not a mapping (a runners.transformer report)")
    items = report.get(key)
    if not isinstance(items, list | tuple) or any(
        not isinstance(item, Mapping) or not set(fields) <= item.keys() for item in items
    ):
        raise v.InvalidInput(key, items, "same_shape", f"a list of records with {', '.join(fields)}")
    return list(items)


def transformer_rows(report: Mapping) -> tuple[str, ...]:
    """The rows a Transformer run exercises (its windows are listed in label order).

    Args: a runners.transformer report: "windows" [{"rank", "padding"}] and "labels", one
        whole-number count per window.
    """
    windows = _records(report, "windows", ("rank", "padding"))
    labels = report.get("labels")
    if not isinstance(labels, list | tuple) or len(labels) != len(windows):
        raise v.InvalidInput("labels", labels, "same_shape", f"one count per window ({len(windows)})")
    rank_counts: dict[int, int] = {}
    for i, (count, window) in enumerate(zip(labels, windows)):
        rank = v.count(window["rank"], f"windows[{i}].rank")
        rank_counts[rank] = rank_counts.get(rank, 0) + v.count(count, f"labels[{i}]")
    rows = ["accumulation_window"]
    if any(v.count(w["padding"], f"windows[{i}].padding") > 0 for i, w in enumerate(windows)):
        rows.append("tail_batch")
    if len(set(rank_counts.values())) > 1:
        rows.append("unequal_lengths")
    if 0 in rank_counts.values() and sum(rank_counts.values()) > 0:
        rows.append("empty_label_replica")
    return tuple(rows)


def evidence_from_transformer(report: Mapping | None) -> tuple[Evidence, ...]:
    """Evidence from a runners.transformer report; () when there is no report.

    Per row, the correct and the slip branch are compared with the full batch of the same
    optimizer, and the worse optimizer counts:
        loss        |loss_branch - loss_full_batch|   (None when the branch is undefined)
        parameters  the report's max |theta_branch - theta_full_batch| after the update
    The run compares gradients too but reports them only where they exceed its tolerance,
    and it does not clip, so those cells stay without a number from this source.
    """
    if not isinstance(report, Mapping) or not report.get("branches"):
        return ()
    tolerance = v.non_negative(report.get("tolerance"), "tolerance")
    by_name: dict[str, list[Mapping]] = {}
    for i, branch in enumerate(_records(report, "branches", ("name", "optimizer", "loss", "max_abs_diff"))):
        if not (isinstance(branch["name"], str) and isinstance(branch["optimizer"], str)):
            raise v.InvalidInput(f"branches[{i}]", branch, "same_shape", "name and optimizer as text")
        by_name.setdefault(branch["name"], []).append(branch)
    reference = {b["optimizer"]: b for b in by_name.get("full_batch", [])}

    def number(x: object, field: str) -> float | None:  # None: the run had no figure
        return None if x is None else v.number(x, field)

    def worst(name: str, column: str) -> float | None:
        gaps = []
        for branch in by_name.get(name, []):
            if column == "parameters":
                gaps.append(number(branch["max_abs_diff"], "max_abs_diff"))
            else:  # no full-batch run of this optimizer: no reference, no gap
                ref = number(reference.get(branch["optimizer"], {}).get("loss"), "loss")
                loss = number(branch["loss"], "loss")
                gaps.append(None if loss is None or ref is None else abs(loss - ref))
        if not gaps or any(g is None or not math.isfinite(g) for g in gaps):
            return None
        return max(gaps)

    out = []
    for row in transformer_rows(report):
        correct, slip = TRANSFORMER_BRANCHES[row]
        for column in TRANSFORMER_COLUMNS:
            out.append(
                Evidence(
                    row, column, "torchrun", worst(correct, column), tolerance, worst(slip, column), True
                )
            )
    return tuple(out)
