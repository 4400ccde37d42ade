"""The one Run panel every page with a real run uses: button, live status, kept result, record.

    result = run_panel("negatives", params, key="par_run", button=t(...), label=t(...))
    if result is not None:
        ...draw result.report...

or, where the page draws nothing else from the result, `run_section(..., show=draw)`: the
same panel and `draw(result)` as one fragment, so a press reruns that part of the page only.

A press runs the experiment (ui.runs: st.status, the cache, the run queue) and keeps
(params, RunResult) in st.session_state["<key>_result"], so the result survives reruns. The
panel returns that result only while it finished and was made with the page's current
parameters; it says so when the inputs changed since, and when a run was interrupted (Stop,
or an input changed while it ran, which reruns the page and ends the run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import streamlit as st

from pclab.runners.results import RunResult  # also the `show` callbacks' type, for pages
from pclab.ui import downloads
from pclab.ui.input_errors import guard
from pclab.ui.language import t


def run_panel(
    experiment: str,
    params: dict,
    *,
    key: str,
    button: str,
    label: str,
    record: str | None = None,
    primary: bool = False,
) -> RunResult | None:
    """Draw the Run button; run on a press; return the kept finished result for `params`.

    Args:
        experiment: the registry name (experiments/registry.py).
        params: the page's current raw parameters (validated by the experiment on a press).
        key: the button's widget key; the result lives under "<key>_result".
        button, label: the button's text and the run's name in the status line.
        record: the run record's file name stem (default: the experiment's name).
        primary: draw the button as the page's main action.
    """
    from pclab.ui.runs import run_with_status  # on demand: rendering a page never loads a runner

    kept, pending = f"{key}_result", f"{key}_pending"
    if st.session_state.pop(pending, None) is not None:
        st.info(t("runs.interrupted"), icon=":material/stop_circle:")
    kind: Literal["primary", "secondary"] = "primary" if primary else "secondary"
    if st.button(button, key=key, icon=":material/play_arrow:", type=kind):
        st.session_state[pending] = params  # still here on the next render: the run was cut off
        st.session_state[kept] = (params, run_with_status(label, experiment, **params))
        st.session_state.pop(pending, None)
    stored, result = st.session_state.get(kept, (None, None))
    if result is None or not result.ok:
        return None
    if stored != params:
        st.caption(f":material/update: {t('runs.inputs_changed')}")
        return None
    downloads.run_download(result, stored, record or experiment)
    return result


@st.fragment
def run_section(
    experiment: str,
    params: dict,
    *,
    show: Callable[[RunResult], None],
    key: str,
    button: str,
    label: str,
    record: str | None = None,
    primary: bool = False,
) -> None:
    """`run_panel(...)` with these arguments and `show(result)` for its kept result, as one
    fragment: Run reruns this part of the page only (issue 35, BENCHMARKS.md). The rest of
    the page - its inputs, figures and charts - is neither run again on the server nor
    redrawn in the browser, which took about as long as a warm-pool run of page 06 itself.
    An input outside the section still reruns the whole page, and with it the section."""
    result = run_panel(
        experiment, params, key=key, button=button, label=label, record=record, primary=primary
    )
    if result is not None:
        with guard():  # a fragment's own rerun runs outside any guard the page put around it
            show(result)
