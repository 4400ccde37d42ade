"""Where the rooms' database goes (pclab/rooms/location.py): PCL_ROOM_DB as given, else the
data folder, else (no writable data folder: a read-only host) a private temporary folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pclab.rooms import location


def test_the_setting_wins(tmp_path):
    chosen = str(tmp_path / "mine.sqlite3")
    assert location.database_path(chosen, {"HOME": "/nonexistent"}) == chosen


def test_the_data_folder_follows_xdg_and_home(tmp_path):
    got = location.database_path("", {"XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert Path(got) == tmp_path / "xdg" / "pclab" / "rooms.sqlite3"
    assert (tmp_path / "xdg" / "pclab").is_dir()
    got = location.database_path("", {"HOME": str(tmp_path)})
    assert Path(got) == tmp_path / ".local" / "share" / "pclab" / "rooms.sqlite3"


def test_no_writable_data_folder_falls_back_to_a_private_temp_folder(tmp_path, capsys):
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # a data folder that cannot be created: under a file
    got = Path(location.database_path("", {"XDG_DATA_HOME": str(blocked)}))
    assert got.parent == Path(tempfile.gettempdir()) / f"pcl-rooms-{os.getuid()}"
    assert got.parent.stat().st_mode & 0o077 == 0  # this user's only
    assert "not writable" in capsys.readouterr().err


def test_a_fallback_folder_open_to_others_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"pcl-rooms-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # someone made it first, open to all
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    got = Path(location.database_path("", {"XDG_DATA_HOME": str(blocked)}))
    assert got.parent != planted and got.parent.name.startswith("pcl-rooms-")
    assert got.parent.stat().st_mode & 0o077 == 0
