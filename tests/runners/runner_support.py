"""Helpers for the real-torchrun tests: a look at the process table (/proc) for anything a
launch left behind. (Fixtures live in conftest.py; this module is importable by name.)"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARK_ENV = "PCL_TEST_MARK"  # inherited by torchrun and every rank: finds them in /proc
NEGATIVES_ARGS = ("--world-size", "3", "--tau", "0.5")  # P > 2 exercises the extended pairs


def _stat(pid: str) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def children(pid: int | None = None) -> list[int]:
    """Direct children of `pid` (default: this test process), zombies included: an
    un-reaped child is a leftover too."""
    pid = os.getpid() if pid is None else pid
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(entry)) is not None and stat[1] == pid:
            found.append(int(entry))
    return found


def marked(mark: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries MARK_ENV=mark."""
    needle = f"{MARK_ENV}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        stat = _stat(entry)
        if needle in environ and stat is not None and stat[0] != "Z":
            found.append(int(entry))
    return found


def use_settings(monkeypatch, **changes) -> None:
    """These runners.settings for the rest of the test (undone with the monkeypatch)."""
    from dataclasses import replace

    from pclab.runners import settings

    monkeypatch.setattr(settings, "_CURRENT", [replace(settings.current(), **changes)])
