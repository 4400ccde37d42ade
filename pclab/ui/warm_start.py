"""Warm the lab as the server starts (`pclab serve`), not when its first visitor arrives.

Streamlit runs no app code before a first page is opened: under a bare `streamlit run app.py`
the server's runtime, its warm pool's first zygote and the background imports (ui.preload)
start on the first script run (app.py), so a first visitor who pressed Run within the next
few seconds waited for the zygote. Measured with a fresh tab per press, Run pressed 1.5 s
after the page loaded, on a server left alone 10 s (BENCHMARKS.md, issue 46): page 06's first
press 3.5 s, its later ones 0.2 s.

`pclab serve` runs Streamlit in its own process and calls `when_serving()` first: a thread
that waits until Streamlit's runtime is up, then builds the lab's runtime (its pool starts
its first zygote), imports what the pages and a first press need, and builds Altair's schema
validator. The pages' own calls (app.py, ui.runs) then find everything done.

(An `st.App` lifespan would warm a bare `streamlit run` too; in Streamlit 1.67 that mode ends
on SIGTERM without the interpreter's exit handlers, which remove the lab's folders, and moves
to the next port when the given one is taken, so the lab does not use it.)
"""

from __future__ import annotations

import threading
import time

from pclab.ui import preload, serving

STARTUP_TIMEOUT_S = 120.0  # Streamlit's runtime is up within a second or two


def when_serving() -> threading.Thread:
    """Start the warm-up thread; it waits for Streamlit's runtime (and gives up silently
    after STARTUP_TIMEOUT_S: the first page view then starts everything, as without it)."""
    serving.single_thread_torch()  # before anything in this process imports torch
    thread = threading.Thread(target=_warm, name="pcl-warm-start", daemon=True)
    thread.start()
    return thread


def _streamlit_serving() -> bool:
    from streamlit.runtime import Runtime, RuntimeState

    return Runtime.exists() and Runtime.instance().state not in (
        RuntimeState.INITIAL,
        RuntimeState.STOPPING,
        RuntimeState.STOPPED,
    )


def _warm() -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not _streamlit_serving():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    serving.started()  # the runtime and its first zygote (a malformed setting exits 2)
    thread = preload.start(delay_s=0.0)  # no page is being drawn yet: no reason to wait
    if thread is not None:
        thread.join()
        _first_press()


def _first_press() -> None:
    """What a server's first press pays once and every later one finds done: the run path
    (ui.runs: the launcher, the run queue, the cache key), each experiment's worker-code hash
    (part of that key: 30-70 ms a worker the first time, memoised after) and Altair's schema
    validator, built the first time a chart is checked (the Transformer's result draws one)."""
    import altair as alt
    import pandas as pd

    import pclab.ui.runs  # noqa: F401 - loaded for later: once per server
    from pclab.experiments import registry
    from pclab.runners.code_hash import worker_code_hash

    for name in registry.names():
        worker_code_hash(registry.get(name).worker)
    alt.Chart(pd.DataFrame({"x": [1.0]})).mark_point().encode(x="x").to_dict()
