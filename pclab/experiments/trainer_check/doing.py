"""What a rank of the check is running: the trainer function it called ("train_step()") or
the check's own step, which a failure's message names (guard.py).

Under a relaunch (units.Units.watch_stack) it is also written, at once, to
<progress>/rank<r>.doing: torchrun ends the peers within 0.1 s of one rank's abort, and a
peer stopped while it handles the failure it caught has left the trainer's frames (its
faulthandler stacks are the check's) and not yet written what it saw; only this file still
says which of the trainer's functions failed (relaunch.py)."""

from __future__ import annotations

import os

CHECK_STEPS = "the check's own steps"
CURRENT: list[str] = [CHECK_STEPS]  # left as is when a trainer function raises: the "where"
DOING_FILE: list[int] = []  # under a relaunch, the open <progress>/rank<r>.doing
DOING_BYTES = 200  # the file's fixed size: each write replaces the whole text in one pwrite


def now_in(what: str) -> str:
    """Set what this rank is running and return what it ran before."""
    before, CURRENT[0] = CURRENT[0], what
    if DOING_FILE:
        os.pwrite(DOING_FILE[0], what.encode()[:DOING_BYTES].ljust(DOING_BYTES), 0)
    return before


def write_to(path: str | os.PathLike[str]) -> None:
    """From now on, also keep what this rank is running in `path` (once per process)."""
    if not DOING_FILE:
        DOING_FILE.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        now_in(CURRENT[0])
