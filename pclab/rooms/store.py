"""The rooms' database: rooms, their anonymous participants, predictions and reveals, in one
SQLite file (WAL mode, so the presenter's view reads while participants write; parameterised
queries only: nothing a participant sends is ever part of SQL text).

    from pclab.rooms.store import RoomStore
    store = RoomStore("rooms.sqlite3")            # or ":memory:" (a test)
    opened = store.open_room()                    # .code for the join link, .host_key kept
    seat = store.join(opened.code)                # a participant's anonymous id
    store.predict(opened.code, seat, "ledger_ex", "scenario marker", 0.4)
    store.reveal(opened.code, opened.host_key, "ledger_ex", "scenario marker", 0.4)
    store.tally(opened.code, "ledger_ex", "scenario marker")   # answered 1, right 1

A room's code cannot be guessed in practice and the room lives 12 hours (rules.py). One
prediction per participant per exercise per scenario; after Reveal the
exercise is closed for the room. Refusals raise `Refused` (a ValueError) with a `reason`.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pclab.rooms.rules import (
    CODE_LENGTH,
    HOST_KEY_LENGTH,
    LIFETIME_S,
    MAX_PARTICIPANTS,
    MAX_ROOMS,
    SEAT_LENGTH,
    Prediction,
    Refused,
    checked,
    exercise_name,
    key_hash,
    scenario_id,
    token,
    well_formed,
)
from pclab.rooms.tally import Tally, summarise

SCHEMA = """
CREATE TABLE IF NOT EXISTS rooms (
    code TEXT PRIMARY KEY, host_hash TEXT NOT NULL,
    opened_at REAL NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS participants (
    room TEXT NOT NULL REFERENCES rooms(code) ON DELETE CASCADE,
    seat TEXT NOT NULL, joined_at REAL NOT NULL, PRIMARY KEY (room, seat));
CREATE TABLE IF NOT EXISTS predictions (
    room TEXT NOT NULL, exercise TEXT NOT NULL, scenario TEXT NOT NULL, seat TEXT NOT NULL,
    number REAL, choice TEXT, made_at REAL NOT NULL,
    PRIMARY KEY (room, exercise, scenario, seat),
    FOREIGN KEY (room, seat) REFERENCES participants(room, seat) ON DELETE CASCADE);
CREATE TABLE IF NOT EXISTS reveals (
    room TEXT NOT NULL REFERENCES rooms(code) ON DELETE CASCADE,
    exercise TEXT NOT NULL, scenario TEXT NOT NULL,
    number REAL, choice TEXT, revealed_at REAL NOT NULL,
    PRIMARY KEY (room, exercise, scenario));
"""


@dataclass(frozen=True)
class Opened:
    """A new room: its code (the join link's) and the presenter's key (the presenter's link's
    only; the database keeps just its hash)."""

    code: str
    host_key: str
    expires_at: float


class RoomStore:
    """The rooms' database on one connection (a lock serialises the server's threads)."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        max_rooms: int = MAX_ROOMS,
        max_participants: int = MAX_PARTICIPANTS,
        lifetime_s: float = LIFETIME_S,
    ) -> None:
        if max_rooms < 1 or max_participants < 1 or not 0 < lifetime_s <= 7 * 86400:
            raise ValueError(
                f"max_rooms={max_rooms}, max_participants={max_participants} must be >= 1 "
                f"and lifetime_s={lifetime_s} in (0, 604800]"
            )
        self.path, self.max_rooms = str(path), max_rooms
        self.max_participants, self.lifetime_s = max_participants, lifetime_s
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, timeout=10, isolation_level=None, check_same_thread=False
        )
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at each checkpoint
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction that takes the write lock at once (no upgrade deadlock)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[object]) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def purge(self, now: float | None = None) -> int:
        """Delete the rooms that have expired (and all they hold). Returns how many."""
        with self._write() as db:
            return db.execute("DELETE FROM rooms WHERE expires_at <= ?", (_now(now),)).rowcount

    def open_room(self, now: float | None = None) -> Opened:
        """A new room with a fresh code; Refused("server_full") at `max_rooms` open rooms."""
        now = _now(now)
        self.purge(now)
        host_key = token(HOST_KEY_LENGTH)
        with self._write() as db:
            (open_rooms,) = db.execute("SELECT COUNT(*) FROM rooms").fetchone()
            if open_rooms >= self.max_rooms:
                raise Refused("server_full", f"{open_rooms} rooms are open (max {self.max_rooms})")
            while True:  # a clash among 6.6e11 codes is next to impossible; never reuse one
                code = token(CODE_LENGTH)
                if not db.execute("SELECT 1 FROM rooms WHERE code = ?", (code,)).fetchone():
                    break
            expires = now + self.lifetime_s
            db.execute(
                "INSERT INTO rooms VALUES (?, ?, ?, ?)", (code, key_hash(host_key), now, expires)
            )
        return Opened(code, host_key, expires)

    def expires_at(self, code: str, now: float | None = None) -> float | None:
        """When the room `code` expires; None when no such room is open (unknown, expired)."""
        if not well_formed(code, CODE_LENGTH):
            return None
        rows = self._read(
            "SELECT expires_at FROM rooms WHERE code = ? AND expires_at > ?", (code, _now(now))
        )
        return rows[0][0] if rows else None

    def _open(self, db: sqlite3.Connection, code: str, now: float | None) -> None:
        if (
            not well_formed(code, CODE_LENGTH)
            or not db.execute(
                "SELECT 1 FROM rooms WHERE code = ? AND expires_at > ?", (code, _now(now))
            ).fetchone()
        ):
            raise Refused("gone", f"room={code[:12]!r} is unknown or has expired")

    def is_host(self, code: str, host_key: str, now: float | None = None) -> bool:
        """Whether `host_key` is the presenter's key of the open room `code`."""
        if not well_formed(host_key, HOST_KEY_LENGTH) or self.expires_at(code, now) is None:
            return False
        rows = self._read("SELECT host_hash FROM rooms WHERE code = ?", (code,))
        return bool(rows) and secrets.compare_digest(rows[0][0], key_hash(host_key))

    def join(self, code: str, seat: str | None = None, now: float | None = None) -> str:
        """A participant's seat in the room: `seat` again when it is already there (the same
        browser coming back), else a new one. Refused("room_full") at `max_participants`."""
        with self._write() as db:
            self._open(db, code, now)
            if (
                well_formed(seat, SEAT_LENGTH)
                and db.execute(
                    "SELECT 1 FROM participants WHERE room = ? AND seat = ?", (code, seat)
                ).fetchone()
            ):
                return str(seat)
            (seated,) = db.execute(
                "SELECT COUNT(*) FROM participants WHERE room = ?", (code,)
            ).fetchone()
            if seated >= self.max_participants:
                raise Refused("room_full", f"{seated} joined (max {self.max_participants})")
            seat = str(seat) if well_formed(seat, SEAT_LENGTH) else token(SEAT_LENGTH)
            db.execute("INSERT INTO participants VALUES (?, ?, ?)", (code, seat, _now(now)))
        return seat

    def predict(
        self,
        code: str,
        seat: str,
        exercise: str,
        scenario: str,
        value: Prediction | None,
        *,
        options: Sequence[str] = (),
        now: float | None = None,
    ) -> None:
        """Record (or replace) the participant's prediction; `None` withdraws it. Refused
        ("closed") once the exercise was revealed for this scenario."""
        key = (code, exercise_name(exercise), scenario_id(scenario))
        number, choice = (None, None) if value is None else checked(value, options)
        with self._write() as db:
            self._open(db, code, now)
            if not db.execute(
                "SELECT 1 FROM participants WHERE room = ? AND seat = ?", (code, seat)
            ).fetchone():
                raise Refused("gone", "this browser has no seat in the room")
            if db.execute(
                "SELECT 1 FROM reveals WHERE room = ? AND exercise = ? AND scenario = ?", key
            ).fetchone():
                raise Refused("closed", f"exercise={exercise!r} was revealed")
            db.execute(
                "DELETE FROM predictions WHERE room = ? AND exercise = ? AND scenario = ? "
                "AND seat = ?",
                (*key, seat),
            )
            if value is not None:
                db.execute(
                    "INSERT INTO predictions VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (*key, seat, number, choice, _now(now)),
                )

    def prediction(self, code: str, seat: str, exercise: str, scenario: str) -> Prediction | None:
        """The participant's recorded prediction, or None."""
        rows = self._read(
            "SELECT number, choice FROM predictions WHERE room = ? AND exercise = ? "
            "AND scenario = ? AND seat = ?",
            (code, exercise, scenario_id(scenario), seat),
        )
        return _value(rows[0]) if rows else None

    def reveal(
        self,
        code: str,
        host_key: str,
        exercise: str,
        scenario: str,
        answer: Prediction | None,
        now: float | None = None,
    ) -> None:
        """Close the exercise for this scenario and keep its answer (None: undefined). Only
        the presenter may (Refused("not_presenter")); a second Reveal changes nothing."""
        if not self.is_host(code, host_key, now):
            raise Refused("not_presenter", "only the room's presenter can reveal")
        number = None if answer is None or isinstance(answer, str) else float(answer)
        choice = answer if isinstance(answer, str) else None
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO reveals VALUES (?, ?, ?, ?, ?, ?)",
                (code, exercise_name(exercise), scenario_id(scenario), number, choice, _now(now)),
            )

    def revealed(self, code: str, exercise: str, scenario: str) -> tuple[bool, Prediction | None]:
        """(whether the exercise was revealed for this scenario, the answer kept then)."""
        rows = self._read(
            "SELECT number, choice FROM reveals WHERE room = ? AND exercise = ? AND scenario = ?",
            (code, exercise, scenario_id(scenario)),
        )
        return (True, _value(rows[0])) if rows else (False, None)

    def tally(
        self, code: str, exercise: str, scenario: str, *, options: Sequence[str] = ()
    ) -> Tally:
        """The room's predictions for the exercise and scenario, summarised (tally.summarise)."""
        params = (code, exercise, scenario_id(scenario))
        rows = self._read(
            "SELECT number, choice FROM predictions WHERE room = ? AND exercise = ? "
            "AND scenario = ?",
            params,
        )
        (seated,) = self._read("SELECT COUNT(*) FROM participants WHERE room = ?", (code,))[0]
        revealed, answer = self.revealed(*params[:2], scenario)
        predictions = [v for v in map(_value, rows) if v is not None]
        return summarise(
            predictions, answer, revealed=revealed, participants=seated, options=options
        )


def _value(row: tuple) -> Prediction | None:
    number, choice = row
    return choice if choice is not None else number


def _now(now: float | None) -> float:
    return time.time() if now is None else now
