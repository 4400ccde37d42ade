"""Page 07's coverage matrix as data: one record per (scenario, comparison) cell, with its
status in words and its measured gaps as numbers (the page shows them inside the cell text)."""

from __future__ import annotations

from pclab.ui.language import t


def coverage_rows(matrix, missing: str = "not_run") -> list[dict]:
    """Records of a core.coverage.CoverageMatrix, headed in the reader's language.
    `missing`: the status word for a cell without evidence ("not_run" or "not_reported")."""
    heading = {k: t(f"validation.matrix.data_{k}") for k in ("correct", "slip", "tolerance")}
    out = []
    for (row, column), cell in matrix.cells.items():
        status = missing if cell.status == "not_run" else cell.status
        out.append(
            {
                t("validation.matrix.row"): t(f"validation.row.{row}"),
                t("validation.matrix.data_column"): t(f"validation.column.{column}"),
                t("validation.matrix.data_status"): t(f"validation.status_word.{status}"),
                heading["correct"]: cell.correct_diff,
                heading["slip"]: cell.slip_diff,
                heading["tolerance"]: cell.tolerance,
            }
        )
    return out
