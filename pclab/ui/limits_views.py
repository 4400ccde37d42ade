"""Page 04's demonstration block: a breaking factor's condition, its headline gap, every
variant's row and the measured sentence, from one core result (core.limits, core.gradcache,
core.trajectory)."""

from __future__ import annotations

import math
import re
from dataclasses import fields

import pandas as pd
import streamlit as st

from pclab.ui import downloads
from pclab.ui.figures import fmt, magnitude
from pclab.ui.language import t

# The results' absolute values (max |Δ|, |loss gap|, a spread, a fraction changed), by field
# or column name: shown without a sign. The others (a loss, a sum, an error) keep theirs.
MAGNITUDE = re.compile(r"^max_|(^|_)(diff|difference|mismatch)$")


def num(x, name: str = "") -> str:
    """Tiny gaps in scientific notation; None / non-finite read 'undefined' via fmt(); the
    field `name` says whether it is an absolute value (MAGNITUDE: no '+')."""
    if isinstance(x, (str, int)):
        return str(x)
    if x is None or not math.isfinite(x) or x == 0 or abs(x) >= 1e-3:
        return magnitude(x) if MAGNITUDE.search(name) else fmt(x)
    return f"{x:.2e}"


def block(name: str, result) -> None:
    """Condition and breaking factor, the headline gap, every variant's row, the measured sentence.

    The sentence reads its numbers from the result: `{row[variant][column]}` for a table
    cell and `{field}` for a scalar field such as `difference`.
    """
    st.subheader(t(f"limits.{name}.title"))
    st.markdown(t(f"limits.{name}.condition"))
    st.metric(t(f"limits.{name}.metric"), num(result.difference, "difference"))
    cells = {row["variant"]: {k: num(x, k) for k, x in row.items()} for row in result.rows}
    table = pd.DataFrame([{**row, "variant": t(f"limits.variant.{v}")} for v, row in cells.items()])
    config = {c: st.column_config.TextColumn(t(f"limits.col.{c}")) for c in table.columns}
    raw = pd.DataFrame(result.rows).assign(variant=table["variant"])  # the numbers, unformatted
    downloads.table(
        table,
        f"limits-{name}",
        data=raw,
        hide_index=True,
        column_config=config,
        key=f"lim_table_{name}",
    )
    values = {f.name: getattr(result, f.name) for f in fields(result)}
    scalars = {k: num(x, k) for k, x in values.items() if isinstance(x, (int, float))}
    st.markdown(t(f"limits.{name}.measured", row=cells, **scalars))
