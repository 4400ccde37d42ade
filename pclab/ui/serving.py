"""The Streamlit server's one lab runtime, and what the server turns on that a CLI or a test
harness does not: the warm pool.

app.py calls `start()` on every script run (cheap after the first). The first call builds the
server's one `Runtime` (pclab.runners.runtime: settings, memory budget, job line, warm pool)
from the PCL_* settings; a malformed one stops the server there, naming the variable. Every
page's run goes through `runtime()` (ui.runs), so visitors share one line and one pool. In a
real server (`streamlit run app.py`) the settings left unset take the server's defaults
(`Settings.served`: PCL_WARM_POOL unset means on), and the pool's first zygote starts in the
background, importing every registered experiment's rank-side code ahead, so the first real
run does not wait for it. PCL_WARM_POOL=0 keeps the server on cold torchrun launches. AppTest
(which runs app.py in the test's own process, under a mock runtime) keeps the cold path
unless told otherwise; `pclab run <experiment>` builds a runtime per run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import streamlit as st

from pclab.runners.runtime import Runtime
from pclab.runners.settings import Settings


def in_real_server() -> bool:
    """True inside `streamlit run` (its Runtime), False under AppTest (a mock Runtime) or
    outside Streamlit."""
    from streamlit.runtime import Runtime as StreamlitRuntime

    return StreamlitRuntime.exists() and type(StreamlitRuntime.instance()) is StreamlitRuntime


@st.cache_resource(show_spinner=False, on_release=Runtime.shutdown)
def runtime() -> Runtime:
    """The server's one runtime, built on first use (ValueError on a malformed PCL_*
    setting); dropped from Streamlit's cache, it is shut down."""
    settings = Settings.from_env(os.environ)
    if in_real_server():
        settings = settings.served()
        _own_torch_cache()
    return Runtime.start(settings)


def start(preload: tuple[str, ...]) -> Runtime:
    """The server's runtime, and its warm pool's first zygote (when the pool is on and has
    none): `preload` names the modules each zygote imports ahead."""
    served = runtime()
    served.pool.prestart(preload=preload)
    return served


def _own_torch_cache() -> None:
    """`import torch._dynamo` (in a zygote, a rank, page 04) creates $TMPDIR/torchinductor_<user>
    and leaves it there. The server's processes use a directory of the server's own instead,
    removed when it exits: a host's temporary directory keeps nothing of the lab's."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    cache = tempfile.mkdtemp(prefix="pcl-torch-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # the zygotes and torchrun inherit it
    atexit.register(shutil.rmtree, cache, True)
