"""Import the heavy libraries in the background once the server has served a page.

A visitor's first trip to a section that computes with torch (04, 07) or draws a chart
otherwise waits for `import torch` (about 2 s on a 2-core box), pandas and altair (about
0.5 s each) inside that page's script run. Started after the first script run, the imports
happen while the visitor reads the home page; a page that needs a module still being imported
waits on Python's import lock for the rest of it, never longer than importing it itself.

PCL_PRELOAD=0 turns it off (the page benchmark and the torch-free-pages test do, to see
what each page imports by itself). It is not a way to make a page import less: the pages'
own imports are unchanged.
"""

from __future__ import annotations

import importlib
import os
import threading

ENV = "PCL_PRELOAD"
MODULES = ("numpy", "pandas", "altair", "torch")
_LOCK = threading.Lock()
_THREAD: list[threading.Thread] = []


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in {"0", "false", "no", "off"}


def start() -> threading.Thread | None:
    """Start the background imports once per process (when enabled); returns the thread."""
    with _LOCK:
        if _THREAD or not enabled():
            return _THREAD[0] if _THREAD else None
        thread = threading.Thread(target=_import_all, name="pcl-preload", daemon=True)
        _THREAD.append(thread)
    thread.start()
    return thread


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a page that needs it will show the real error
            pass
