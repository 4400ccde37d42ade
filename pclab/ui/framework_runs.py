"""The "across a run" part of "Frameworks, measured" (sections/frameworks.py): one bordered
block per framework, from its run record (pclab/artifacts/framework_runs.json, written by
`python -m pclab.experiments.trainer_check.frameworks --runs`): the tail window, the schedule,
the N = 0 window, the restart and what to set, in the reader's language
(frameworks.run_words), then the versions that recorded it and the upstream issues. Shown
from the record only: a run row costs a whole run (and eight restarts), too much for a button
on a shared server; `pclab check` on its file measures it anywhere.
"""

from __future__ import annotations

import streamlit as st

from pclab.experiments.trainer_check import frameworks
from pclab.experiments.trainer_check.frameworks import run_table, run_words
from pclab.ui.framework_issues import run_issue_links
from pclab.ui.framework_rows import when
from pclab.ui.language import t
from pclab.ui.plain_text import plain


def _recorded(record: dict) -> str:
    # the lab's own record, shown as code: only a backtick could end the span early
    commands = ", ".join(f"`{c.replace('`', '')}`" for c in record["commands"])
    return t(
        "frameworks.runs.recorded",
        package=plain(record["package"]),
        version=plain(record["version"]),
        torch=plain(record["torch"]),
        date=when(record["recorded_at"]),
        commands=commands,
    )


def section() -> None:
    """Every recorded run row, in the table's order."""
    st.subheader(t("frameworks.runs.heading"))
    st.markdown(t("frameworks.runs.lead", world_size=frameworks.WORLD_SIZE, accum=frameworks.ACCUM))
    for record in run_table.load_runs()["records"]:
        words = run_words.cells(record, t)
        with st.container(border=True):
            st.markdown(f"**{plain(record['framework'])}**")
            for column in run_words.COLUMNS:
                st.markdown(f"**{t(f'frameworks.runs.{column}')}:** {words[column]}")
            if links := run_issue_links(record["code"]):
                st.markdown(links)
            st.caption(_recorded(record))
    st.markdown(t("frameworks.runs.without_loop"))
