"""What the Streamlit server turns on that a CLI or a test harness does not: the warm pool.

app.py calls `start()` on every script run (cheap after the first). In a real server
(`streamlit run app.py`) the settings left unset take the server's defaults
(runners.settings.serve_by_default: PCL_WARM_POOL unset means on), and the pool's first
zygote starts in the background, importing every registered experiment's rank-side code
ahead, so the first real run does not wait for it. PCL_WARM_POOL=0 keeps the server on cold
torchrun launches. AppTest (which runs app.py in the test's own process, under a mock
runtime) and `pclab run <experiment>` keep the cold path unless told otherwise.

A malformed PCL_* setting stops the real server on its first script run (Streamlit runs
app.py for the first time when the first page is opened): one line on stderr naming the
variable and the form it takes, exit status 2. Every page would otherwise fail the same way.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
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
        if (error := settings.malformed()) is not None:
            sys.stderr.write(f"Parallel Correctness Lab cannot start: {error}\n")
            sys.stderr.flush()
            os._exit(2)  # the whole server: no page could honour the setting
        _STARTED.append(True)
        if settings.current().warm_pool is None:
            settings.serve_by_default()
        _own_torch_cache()
    warm_pool.prestart(preload=preload)


CACHE_PREFIX = "pcl-torch-cache-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_caches(temp: str | None = None) -> list[str]:
    """Remove this user's torch cache directories left by servers that died without cleaning
    up (SIGKILL, a power cut): each is named after its server's process id. Returns them."""
    temp = temp or tempfile.gettempdir()
    removed = []
    for entry in os.scandir(temp):
        pid = entry.name.removeprefix(CACHE_PREFIX).split("-", 1)[0]
        if not (entry.name.startswith(CACHE_PREFIX) and pid.isdigit()):
            continue
        if (
            entry.is_dir(follow_symlinks=False)
            and entry.stat(follow_symlinks=False).st_uid == os.geteuid()
        ):
            if not _alive(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


def _own_torch_cache() -> None:
    """`import torch._dynamo` (in a zygote, a rank, page 04) creates $TMPDIR/torchinductor_<user>
    and leaves it there. The server's processes use a directory of the server's own instead,
    removed when it exits; one a killed server could not remove is removed by the next server
    to start: a host's temporary directory keeps nothing of the lab's."""
    remove_stale_caches()
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    cache = tempfile.mkdtemp(prefix=f"{CACHE_PREFIX}{os.getpid()}-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # the zygotes and torchrun inherit it
    atexit.register(shutil.rmtree, cache, True)
