"""The room's rules: what a code, a seat and a presenter's key look like, the limits, and
how a prediction is validated (as the page validates it) before it reaches SQL.

A room code is 8 characters from 30 (no 0/O, 1/I/L, E: nothing to misread aloud, and no
code reads as a number such as 2E999 that the lab's link checks would drop): 30^8 = 6.6e11
codes, so with at most `MAX_ROOMS` open a guess finds one with odds below 1 in 1e10.

    python -c "from pclab.rooms import rules; print(rules.token(rules.CODE_LENGTH))"
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

ALPHABET = "23456789ABCDFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH, SEAT_LENGTH, HOST_KEY_LENGTH, SECRET_LENGTH = 8, 16, 24, 32
LIFETIME_S = 12 * 3600.0
MAX_ROOMS = 50  # open rooms on one server
MAX_PARTICIPANTS = 150  # per room
# Seats one client (a network address; an IPv6 /64) may be issued in one room: a script from
# one address takes at most a fifth of the room, and a class behind one NAT still fits 30.
MAX_SEATS_PER_CLIENT = 30
CLIENT_BUCKET_HEX = 4  # a client kept as 16 bits of a keyed hash: never its address
EXERCISE = re.compile(r"[a-z][a-z0-9_]{0,39}")
OPTION = re.compile(r"[a-z0-9_]{1,40}")
REASONS = (
    "gone",
    "room_full",
    "client_full",
    "server_full",
    "closed",
    "not_presenter",
    "invalid",
    "seat_unknown",
    "seat_not_yours",
)
Prediction = float | str


@dataclass(frozen=True)
class Seat:
    """A participant's place in a room: `seat`, the public id (the page's `seat=`), and
    `secret`, which only the browser it was issued to keeps (the database has its hash)."""

    seat: str
    secret: str


@dataclass(frozen=True)
class Opened:
    """A new room: its code (the join link's) and the presenter's key (the presenter's link's
    only; the database keeps just its hash)."""

    code: str
    host_key: str
    expires_at: float


class Refused(ValueError):
    """What the room cannot do, with a stable `reason` (one of REASONS) a page translates."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def token(length: int) -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def client_bucket(salt: str, client: str) -> str:
    """The client as the room's database keeps it: 16 bits of an HMAC under the room's own
    random salt. Enough to count one address's seats (two clients share a bucket with odds
    1 in 65536, and then only share a cap); too few to tell the address back, even to
    someone holding the database: 65536 IPv4 addresses, and the salt goes with the room."""
    digest = hmac.new(salt.encode(), client.encode(), hashlib.sha256).hexdigest()
    return digest[:CLIENT_BUCKET_HEX]


def client_of(address: object) -> str:
    """The client a network address stands for: an IPv4 address itself, an IPv6 address by
    its /64 (one household's or one machine's block, which a script can cycle through), and
    a connection from this machine (None: Streamlit's loopback; no address at all) as
    "local"."""
    if not isinstance(address, str) or not address:
        return "local"
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:  # ::ffff:10.1.2.3 is 10.1.2.3
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


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
