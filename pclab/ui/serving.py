"""The Streamlit server's one lab runtime, and what the server turns on that a CLI or a test
harness does not: the warm pool.

app.py calls `started()` on every script run (cheap after the first). The first call builds the
server's one `Runtime` (pclab.runners.runtime: settings, memory budget, run queue, warm pool)
from the PCL_* settings; a malformed one stops the server there, naming the variable. Every
page's run goes through `started()` (ui.runs), so visitors share one line and one pool. In a
real server (`streamlit run app.py`) the settings left unset take the server's defaults
(`Settings.served`: PCL_WARM_POOL unset means on), and the pool's first zygote starts in the
background, importing every registered experiment's rank-side code ahead (and the installed
training frameworks, unless PCL_PRELOAD_FRAMEWORKS=0), so the first real run does not wait
for it. PCL_WARM_POOL=0 keeps the server on cold torchrun launches. AppTest
(which runs app.py in the test's own process, under a mock runtime) keeps the cold path
unless told otherwise; `pclab run <experiment>` builds a runtime per run.
"""

from __future__ import annotations

import functools
import os
import sys

import streamlit as st

from pclab.experiments import registry
from pclab.runners import scratch
from pclab.runners.runtime import Runtime
from pclab.runners.settings import Settings


def single_thread_torch() -> None:
    """One intra-op thread per torch computation in the server and its zygotes: the pages'
    tensors are tiny, and on a small shared box (2 cores, several visitors) extra threads
    only contend (measured 25x slower). Set before torch is imported, which reads it once."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


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


def started() -> Runtime:
    """The server's runtime, and its warm pool's first zygote (when the pool is on and has
    none), which imports every registered experiment's rank-side code ahead, and the
    installed training frameworks' unless PCL_PRELOAD_FRAMEWORKS=0 (a framework check from
    the "Frameworks, measured" page then answers in ~2 s instead of ~5 s: BENCHMARKS.md).

    app.py calls it on each full script run, and every run asks for it (ui.runs): a press on
    Run reruns its fragment only (ui.run_panel.run_section), not app.py, and after Streamlit's
    caches were cleared ("Clear caches" drops the runtime) that press would otherwise build a
    runtime whose pool was never started with its preloads (a Hugging Face Trainer check then
    took 3.0 s instead of 1.3 s: BENCHMARKS.md, issue 35).

    A malformed PCL_* setting stops the real server on its first script run (Streamlit runs
    app.py for the first time when the first page is opened): one line on stderr naming the
    variable and the form it takes, exit status 2. Every page would otherwise fail the same
    way. Under AppTest the ValueError goes to the test."""
    try:
        served = runtime()
    except ValueError as error:
        if not in_real_server():
            raise
        sys.stderr.write(f"Parallel Correctness Lab cannot start: {error}\n")
        sys.stderr.flush()
        os._exit(2)  # the whole server: no page could honour the setting
    preload = registry.worker_modules()
    if served.settings.preload_frameworks:  # PCL_PRELOAD_FRAMEWORKS=0 leaves them to the ranks
        preload = (*preload, *_framework_modules())
    served.pool.prestart(preload=preload)
    return served


@functools.cache
def _framework_modules() -> tuple[str, ...]:
    """The installed training frameworks' modules their adapters' ranks import (the
    "Frameworks, measured" page's Run): read once per server (2 ms a package)."""
    from pclab.experiments.trainer_check import frameworks

    return frameworks.preload_modules()


CACHE_KIND = "torch-cache"
CACHE_PREFIX = f"{scratch.PREFIX}{CACHE_KIND}-"


def _own_torch_cache() -> None:
    """`import torch._dynamo` (in a zygote, a rank, page 04) creates $TMPDIR/torchinductor_<user>
    and leaves it there. The server's processes use a directory of the server's own instead,
    removed when it exits. Every lab folder a killed server (or run) left is removed first
    (runners.scratch): a host's temporary directory keeps nothing of the lab's."""
    scratch.remove_stale()
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    cache = scratch.folder(CACHE_KIND)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)  # the zygotes and torchrun inherit it
