"""Which SQLite file holds the rooms: PCL_ROOM_DB when set, else `rooms.sqlite3` in the lab's
data folder ($XDG_DATA_HOME/pclab, by default ~/.local/share/pclab), created on first use.

A host that gives the server no writable home (a read-only account) gets a folder of the
server's user in the system's temporary folder instead, and the server's log says so: rooms
then outlive a restart of the server, not a reboot of the host. Never the checkout: a
read-only checkout stays untouched.

    python -m pclab.rooms.location        # prints the file the server would use
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

FILE_NAME = "rooms.sqlite3"


def data_folder(environ: Mapping[str, str]) -> Path:
    """The lab's data folder: $XDG_DATA_HOME/pclab, else ~/.local/share/pclab."""
    base = environ.get("XDG_DATA_HOME") or str(Path(environ.get("HOME") or "~") / ".local/share")
    return Path(base).expanduser() / "pclab"


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)


def _private(folder: Path) -> Path:
    """`folder`, created for this user alone; a fresh temporary folder when one of that name
    is not this user's own (a link, another user's, open to others): rooms then last as long
    as this server."""
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return Path(tempfile.mkdtemp(prefix="pcl-rooms-"))
    return folder


def database_path(configured: str, environ: Mapping[str, str]) -> str:
    """The rooms' file: `configured` (PCL_ROOM_DB) as given, else the data folder's, else a
    private folder in the system's temporary folder (said on stderr)."""
    if configured:
        return configured
    folder = data_folder(environ)
    if not _writable(folder):
        fallback = Path(tempfile.gettempdir()) / f"pcl-rooms-{os.getuid()}"
        print(
            f"Parallel Correctness Lab: {folder} is not writable; rooms are kept in "
            f"{fallback} (they outlive a restart of the server, not a reboot)",
            file=sys.stderr,
        )
        folder = _private(fallback)
    return str(folder / FILE_NAME)


if __name__ == "__main__":
    from pclab.runners.settings import Settings

    print(database_path(Settings.from_env(os.environ).room_db, os.environ))
