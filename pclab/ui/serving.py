"""What the Streamlit server turns on that a CLI or a test harness does not: the warm pool.

app.py calls `start()` on every script run (cheap after the first). In a real server
(`streamlit run app.py`) the settings left unset take the server's defaults
(runners.settings.serve_by_default: PCL_WARM_POOL unset means on), and the pool's first
zygote starts in the background, importing every registered experiment's rank-side code
ahead, so the first real run does not wait for it. PCL_WARM_POOL=0 keeps the server on cold
torchrun launches. AppTest (which runs app.py in the test's own process, under a mock
runtime) and `pclab run <experiment>` keep the cold path unless told otherwise.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from pclab.runners import settings, warm_pool

_STARTED: list[bool] = []


def in_real_server() -> bool:
    """True inside `streamlit run` (its Runtime), False under AppTest (a mock Runtime) or
    outside Streamlit."""
    from streamlit.runtime import Runtime

    return Runtime.exists() and type(Runtime.instance()) is Runtime


def start(preload: tuple[str, ...]) -> None:
    """The server's defaults (once), then the warm pool's first zygote (when the pool is
    on and has none): `preload` names the modules each zygote imports ahead."""
    if not _STARTED and in_real_server():
        _STARTED.append(True)
        if settings.current().warm_pool is None:
            settings.serve_by_default()
        _own_torch_cache()
    warm_pool.prestart(preload=preload)


def _own_torch_cache() -> None:
    """`import torch._dynamo` (in a zygote, a rank, page 04) creates $TMPDIR/torchinductor_<user>
    and leaves it there. The server's processes use a directory of the server's own instead,
    removed when it exits: a host's temporary directory keeps nothing of the lab's."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    cache = tempfile.mkdtemp(prefix="pcl-torch-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # the zygotes and torchrun inherit it
    atexit.register(shutil.rmtree, cache, True)
