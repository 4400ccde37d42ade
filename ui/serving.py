"""What the Streamlit server turns on that a CLI or a test harness does not: the warm pool.

app.py calls `start()` on every script run (cheap after the first). In a real server
(`streamlit run app.py`) the settings left unset take the server's defaults
(runners.settings.serve_by_default: PCL_WARM_POOL unset means on), and the pool's first
zygote starts in the background, importing every registered experiment's rank-side code
ahead, so the first real run does not wait for it. PCL_WARM_POOL=0 keeps the server on cold
torchrun launches. AppTest (which runs app.py in the test's own process, under a mock
runtime) and `python -m runners.<experiment>` keep the cold path unless told otherwise.
"""

from __future__ import annotations

from runners import settings, warm_pool


def in_real_server() -> bool:
    """True inside `streamlit run` (its Runtime), False under AppTest (a mock Runtime) or
    outside Streamlit."""
    from streamlit.runtime import Runtime

    return Runtime.exists() and type(Runtime.instance()) is Runtime


def start(preload: tuple[str, ...]) -> None:
    """The server's defaults (once), then the warm pool's first zygote (when the pool is
    on and has none): `preload` names the modules each zygote imports ahead."""
    if settings.current().warm_pool is None and in_real_server():
        settings.serve_by_default()
    warm_pool.prestart(preload=preload)
