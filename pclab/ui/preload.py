"""Import the heavy libraries in the background once the server has served a page.

A visitor's first trip to a section that computes with torch (04, 07) or draws a chart
otherwise waits for `import torch` (about 2 s on a 2-core box), pandas and altair (about
0.5 s each) inside that page's script run. The imports start DELAY_S after the first script
run, while the visitor reads the first page: not at once, because they hold the GIL and a
core for seconds, and the browser is still painting that page (measured: starting at once
delayed the first page's title by 0.2 s and the next page visits by up to 1.4 s). A page that
needs a module still being imported waits on Python's import lock for the rest of it, never
longer than importing it itself.

Once imported, everything the server holds is frozen out of the garbage collector
(`gc.freeze`): its full passes then skip the ~370,000 objects of these libraries.

PCL_PRELOAD=0 turns it off (the page benchmark and the torch-free-pages test do, to see
what each page imports by itself). It is not a way to make a page import less: the pages'
own imports are unchanged.
"""

from __future__ import annotations

import gc
import importlib
import threading
import time

from pclab.ui import serving

MODULES = ("numpy", "pandas", "altair", "torch")
DELAY_S = 3.0
_LOCK = threading.Lock()
_THREAD: list[threading.Thread] = []


def enabled() -> bool:
    """The server's `preload` setting (ui.serving; PCL_PRELOAD=0 turns it off)."""
    return serving.runtime().settings.preload


def start(delay_s: float = DELAY_S) -> threading.Thread | None:
    """Start the background imports once per process (when enabled), after `delay_s`;
    returns the thread."""
    with _LOCK:
        if _THREAD or not enabled():
            return _THREAD[0] if _THREAD else None
        thread = threading.Thread(
            target=_import_all, args=(delay_s,), name="pcl-preload", daemon=True
        )
        _THREAD.append(thread)
    thread.start()
    return thread


def _import_all(delay_s: float) -> None:
    time.sleep(delay_s)
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a page that needs it will show the real error
            pass
    # The modules' objects live as long as the server: out of the collector's reach, a full
    # collection no longer walks them (~0.3 s with the GIL held, during which no result
    # reaches a browser; Streamlit's own forced collection per run is off in config.toml).
    gc.collect()
    gc.freeze()
