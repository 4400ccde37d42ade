"""The room's rules: what a code, a seat and a presenter's key look like, the limits, and
how a prediction is validated (as the page validates it) before it reaches SQL.

A room code is 8 characters from 30 (no 0/O, 1/I/L, E: nothing to misread aloud, and no
code reads as a number such as 2E999 that the lab's link checks would drop): 30^8 = 6.6e11
codes, so with at most `MAX_ROOMS` open a guess finds one with odds below 1 in 1e10.

    python -c "from pclab.rooms import rules; print(rules.token(rules.CODE_LENGTH))"
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
from collections.abc import Sequence

ALPHABET = "23456789ABCDFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH, SEAT_LENGTH, HOST_KEY_LENGTH = 8, 16, 24
LIFETIME_S = 12 * 3600.0
MAX_ROOMS = 50  # open rooms on one server
MAX_PARTICIPANTS = 150  # per room
EXERCISE = re.compile(r"[a-z][a-z0-9_]{0,39}")
OPTION = re.compile(r"[a-z0-9_]{1,40}")
REASONS = ("gone", "room_full", "server_full", "closed", "not_presenter", "invalid")
Prediction = float | str


class Refused(ValueError):
    """What the room cannot do, with a stable `reason` (one of REASONS) a page translates."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def token(length: int) -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def scenario_id(marker: str) -> str:
    """The scenario a page describes (any text), as a fixed-size id."""
    return hashlib.sha256(marker.encode()).hexdigest()[:24]


def well_formed(token: object, length: int) -> bool:
    """Whether `token` could be a code, seat or key of that length (checked before any query)."""
    return isinstance(token, str) and len(token) == length and set(token) <= set(ALPHABET)


def checked(value: object, options: Sequence[str]) -> tuple[float | None, str | None]:
    """(number, choice) for a prediction, as the page validates it: a finite number, or one
    of the page's options when it offers options."""
    if options:
        if isinstance(value, str) and value in options and OPTION.fullmatch(value):
            return None, value
        raise Refused("invalid", f"prediction={str(value)[:40]!r} must be one of {options}")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Refused("invalid", f"prediction={str(value)[:40]!r} must be a finite number")
    return float(value), None


def exercise_name(exercise: str) -> str:
    if not EXERCISE.fullmatch(exercise):
        raise Refused("invalid", f"exercise={exercise[:40]!r} must match {EXERCISE.pattern}")
    return exercise
