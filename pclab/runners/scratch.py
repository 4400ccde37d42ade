"""The lab's temporary folders: each named after the process that owns it, removed when its
work ends, and removed by the next start when its owner died without cleaning up.

    folder("run")        $TMPDIR/pcl-run-<pid>-<random>: one launch's rank outputs and logs,
                         and the ranks' own $TMPDIR (a trainer's `pcl-hf-trainer-*` lands
                         inside it, so a killed rank leaves nothing behind at the top)
    remove_stale()       every `pcl-<kind>-<pid>-*` folder of this user whose owner is dead
                         (SIGKILL, a power cut); a live owner's (another server, a test on
                         another worker) is left alone

A folder still held when the interpreter exits (SIGTERM of the server during a run) is
removed then: an exit handler is registered while any is held (importing this module
registers nothing). The Streamlit server calls `remove_stale` when it starts (ui.serving), and
`pclab serve` before it starts Streamlit.

    python -m pclab.runners.scratch      # removes the stale folders, prints them
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

PREFIX = "pcl-"
_OWNED = re.compile(r"pcl-[a-z]+(?:-[a-z]+)*?-([0-9]+)-.+")  # pcl-<kind>-<owner pid>-<random>
_HELD: set[Path] = set()  # this process's folders not yet removed
_LOCK = threading.Lock()  # runs start and end in their own threads


def folder(kind: str) -> Path:
    """A new folder `pcl-<kind>-<this pid>-*` in the temporary directory, removed by
    `remove` or, at the latest, when this interpreter exits."""
    made = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-{os.getpid()}-"))
    with _LOCK:
        if not _HELD:
            atexit.register(_remove_held)
        _HELD.add(made)
    return made


def remove(made: Path) -> None:
    """Remove a folder `folder` made, with everything in it (gone already: nothing to do)."""
    shutil.rmtree(made, ignore_errors=True)
    with _LOCK:
        if made in _HELD:
            _HELD.discard(made)
            if not _HELD:
                atexit.unregister(_remove_held)


def owner(name: str) -> int | None:
    """The process id a lab folder's name records (None: not a lab folder with an owner)."""
    found = _OWNED.fullmatch(name)
    return int(found.group(1)) if found else None


def alive(pid: int) -> bool:
    """True while process `pid` exists (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(temp: str | None = None) -> list[str]:
    """Remove this user's lab folders in `temp` (default: the temporary directory) whose
    owner process is dead. Returns their paths."""
    temp = temp or tempfile.gettempdir()
    removed = []
    for entry in os.scandir(temp):
        pid = owner(entry.name)
        if pid is None or not entry.is_dir(follow_symlinks=False):
            continue
        if entry.stat(follow_symlinks=False).st_uid == os.geteuid() and not alive(pid):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _remove_held() -> None:
    """At exit: every folder still held (the handler is not unregistered from within)."""
    with _LOCK:
        held = list(_HELD)
        _HELD.clear()
    for made in held:
        shutil.rmtree(made, ignore_errors=True)


if __name__ == "__main__":
    for path in remove_stale():
        print(f"removed {path}")
