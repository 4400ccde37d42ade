"""Page 10's inputs: the epoch's table of valid labels (P ranks x M microbatches), carried in
the page's link, and what core needs from it - the counts (each cell checked, an error named by
its column and rank), and the windows a run skips (N = 0).

The preset is the trainer check's own `uneven` run scenario, its first epoch
(experiments.trainer_check.run_scenarios): at P = 2, M = 5 the page's table is the epoch the
real run below trains on.

    python -c "from pclab.ui.across_inputs import preset; print(preset(2, 5))"
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pclab.core import validation as v
from pclab.core import windows
from pclab.experiments.trainer_check import run_scenarios
from pclab.ui import deeplink
from pclab.ui.input_errors import table_row
from pclab.ui.language import t
from pclab.ui.rank_table import rank_label
from pclab.ui.trainer_views import CAPACITY

TABLE_KEY, LINK_KEY = "acr_table", "acr_cells"  # the editor's state; its cells in the link
MAX_MICROBATCHES = 12  # a table that still fits a projector's width


def columns(microbatches: int) -> list[str]:
    return [f"m{j}" for j in range(microbatches)]


def preset(world_size: int, microbatches: int) -> pd.DataFrame:
    """The check's `uneven` counts, first epoch, cut to P x M (one row per rank)."""
    accum = max(1, -(-(microbatches - 1) // 2))  # its scenarios hold M = 2K + 1 microbatches
    grid = run_scenarios.scenario_counts(world_size, accum, CAPACITY)["uneven"]
    return pd.DataFrame(
        [
            {"rank": r, **{c: grid[r][0][j] for j, c in enumerate(columns(microbatches))}}
            for r in range(world_size)
        ]
    )


def headers(microbatches: int) -> dict[str, str]:
    """Each editable column's header, as the reader sees it (also the names errors use)."""
    return {
        c: t("across.windows.col_microbatch", index=j) for j, c in enumerate(columns(microbatches))
    }


def counts_table(world_size: int, microbatches: int) -> pd.DataFrame:
    """The editable table, its cells in the link (`?acr_cells=`); returns the edited frame."""
    base = preset(world_size, microbatches)
    cols = columns(microbatches)
    number = st.column_config.NumberColumn
    edited = st.data_editor(
        deeplink.table(LINK_KEY, base, cols),
        key=TABLE_KEY,
        hide_index=True,
        disabled=["rank"],
        column_config={
            "rank": number(t("across.windows.col_rank")),
            **{c: number(label, min_value=0, step=1) for c, label in headers(microbatches).items()},
        },
    )
    deeplink.table_to_url(LINK_KEY, edited, base, cols)
    return edited


def counts_of(frame: pd.DataFrame, microbatches: int) -> tuple[tuple[int, ...], ...]:
    """The table's counts, each cell a whole number >= 0 (else an error naming its column
    and its rank: call inside `guard(headers(M))`)."""
    grid = []
    for r, row in enumerate(frame.to_dict("records")):
        with table_row(rank_label(r)):
            grid.append(tuple(v.count(row[c], c) for c in columns(microbatches)))
    return tuple(grid)


def skipped_windows(
    counts: tuple[tuple[int, ...], ...], accum_steps: int, epochs: int, empty_second: bool
) -> tuple[int, ...]:
    """The run's windows with N = 0 (global indices over every epoch): the table's empty
    windows in every epoch, and with `empty_second` the run's second window (as the check's
    `empty_window` scenario empties it)."""
    per_epoch = windows.epoch_updates(counts, accum_steps, windows.CORRECT_LOOP)
    empty = [u.window.index for u in per_epoch if u.window.num_valid_labels == 0]
    found = {e * len(per_epoch) + w for e in range(epochs) for w in empty}
    if empty_second and epochs * len(per_epoch) > 1:
        found.add(1)
    return tuple(sorted(found))
