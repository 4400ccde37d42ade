"""The rooms' database: rooms, their anonymous participants, predictions and reveals, in one
SQLite file (WAL mode, so the presenter's view reads while participants write; parameterised
queries only: nothing a participant sends is ever part of SQL text).

    from pclab.rooms.store import RoomStore
    store = RoomStore("rooms.sqlite3")            # or ":memory:" (a test)
    opened = store.open_room()                    # .code for the join link, .host_key kept
    seat = store.join(opened.code, client="198.51.100.7")   # .seat public, .secret the browser's
    store.seat_of(opened.code, seat.secret)       # the same browser coming back: seat.seat
    store.predict(opened.code, seat.secret, "ledger_ex", "scenario marker", 0.4)
    store.reveal(opened.code, opened.host_key, "ledger_ex", "scenario marker", 0.4)
    store.tally(opened.code, "ledger_ex", "scenario marker")   # answered 1, right 1

A room's code cannot be guessed in practice and the room lives 12 hours (rules.py). Seats are
issued here only: each has a public id (the page's `seat=`) and a secret the participant's
browser keeps; the database holds the secret's hash, and a prediction is written only with
the secret. One client (a network address) is issued at most `max_per_client` seats a room,
so no script can fill it. One prediction per seat per exercise per scenario; after Reveal the
exercise is closed for the room. Refusals raise `Refused` (a ValueError) with a `reason`.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pclab.rooms import rules, schema
from pclab.rooms.rules import Opened, Prediction, Refused, Seat
from pclab.rooms.tally import WITHIN, Tally, summarise


class RoomStore:
    """The rooms' database on one connection (a lock serialises the server's threads)."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        max_rooms: int = rules.MAX_ROOMS,
        max_participants: int = rules.MAX_PARTICIPANTS,
        max_per_client: int = rules.MAX_SEATS_PER_CLIENT,
        lifetime_s: float = rules.LIFETIME_S,
    ) -> None:
        limits = (max_rooms, max_participants, max_per_client)
        if min(limits) < 1 or not 0 < lifetime_s <= 7 * 86400:
            raise ValueError(
                f"max_rooms={max_rooms}, max_participants={max_participants}, "
                f"max_per_client={max_per_client} must be >= 1 "
                f"and lifetime_s={lifetime_s} in (0, 604800]"
            )
        self.path, self.max_rooms = str(path), max_rooms
        self.max_participants, self.lifetime_s = max_participants, lifetime_s
        self.max_per_client = max_per_client
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, timeout=10, isolation_level=None, check_same_thread=False
        )
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at each checkpoint
        self._db.execute("PRAGMA foreign_keys=ON")
        schema.create(self._db)

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
        host_key = rules.token(rules.HOST_KEY_LENGTH)
        with self._write() as db:
            (open_rooms,) = db.execute("SELECT COUNT(*) FROM rooms").fetchone()
            if open_rooms >= self.max_rooms:
                raise Refused("server_full", f"{open_rooms} rooms are open (max {self.max_rooms})")
            while True:  # a clash among 6.6e11 codes is next to impossible; never reuse one
                code = rules.token(rules.CODE_LENGTH)
                if not db.execute("SELECT 1 FROM rooms WHERE code = ?", (code,)).fetchone():
                    break
            expires = now + self.lifetime_s
            db.execute(
                "INSERT INTO rooms (code, host_hash, opened_at, expires_at, salt) "
                "VALUES (?, ?, ?, ?, ?)",
                (code, rules.key_hash(host_key), now, expires, rules.token(schema.SALT_LENGTH)),
            )
        return Opened(code, host_key, expires)

    def expires_at(self, code: str, now: float | None = None) -> float | None:
        """When the room `code` expires; None when no such room is open (unknown, expired)."""
        if not rules.well_formed(code, rules.CODE_LENGTH):
            return None
        rows = self._read(
            "SELECT expires_at FROM rooms WHERE code = ? AND expires_at > ?", (code, _now(now))
        )
        return rows[0][0] if rows else None

    def _open(self, db: sqlite3.Connection, code: str, now: float | None) -> None:
        live = "SELECT 1 FROM rooms WHERE code = ? AND expires_at > ?"  # only if well formed
        well_formed = rules.well_formed(code, rules.CODE_LENGTH)
        if not well_formed or not db.execute(live, (code, _now(now))).fetchone():
            raise Refused("gone", f"room={code[:12]!r} is unknown or has expired")

    def is_host(self, code: str, host_key: str, now: float | None = None) -> bool:
        """Whether `host_key` is the presenter's key of the open room `code`."""
        if (
            not rules.well_formed(host_key, rules.HOST_KEY_LENGTH)
            or self.expires_at(code, now) is None
        ):
            return False
        rows = self._read("SELECT host_hash FROM rooms WHERE code = ?", (code,))
        return bool(rows) and secrets.compare_digest(rows[0][0], rules.key_hash(host_key))

    def join(self, code: str, *, client: str = "", now: float | None = None) -> Seat:
        """A new seat in the room for `client` (rules.client_of: a network address), with a
        new secret. Refused("room_full") at `max_participants`, Refused("client_full") once
        `client` was issued `max_per_client` seats of this room."""
        secret = rules.token(rules.SECRET_LENGTH)
        with self._write() as db:
            self._open(db, code, now)
            (seated,) = db.execute(
                "SELECT COUNT(*) FROM participants WHERE room = ?", (code,)
            ).fetchone()
            if seated >= self.max_participants:
                raise Refused("room_full", f"{seated} joined (max {self.max_participants})")
            (salt,) = db.execute("SELECT salt FROM rooms WHERE code = ?", (code,)).fetchone()
            bucket = rules.client_bucket(salt, client)
            (theirs,) = db.execute(
                "SELECT COUNT(*) FROM participants WHERE room = ? AND client = ?", (code, bucket)
            ).fetchone()
            if theirs >= self.max_per_client:
                raise Refused("client_full", f"{theirs} seats for one client already")
            # 30^16 ids: a clash is next to impossible (the key refuses it)
            seat = rules.token(rules.SEAT_LENGTH)
            db.execute(
                "INSERT INTO participants (room, seat, joined_at, secret_hash, client) "
                "VALUES (?, ?, ?, ?, ?)",
                (code, seat, _now(now), rules.key_hash(secret), bucket),
            )
        return Seat(seat, secret)

    def seat_of(self, code: str, secret: str, now: float | None = None) -> str | None:
        """The seat `secret` holds in the open room `code` (the browser it was issued to,
        back after a reload, in a second tab, after a restart); None for any other value."""
        if self.expires_at(code, now) is None:
            return None
        with self._lock:
            return _seat(self._db, code, secret)

    def predict(
        self,
        code: str,
        secret: str,
        exercise: str,
        scenario: str,
        value: Prediction | None,
        *,
        options: Sequence[str] = (),
        now: float | None = None,
    ) -> None:
        """Record (or replace) the prediction of the seat `secret` holds; `None` withdraws it.
        Only the seat's own secret writes it (Refused("seat_unknown") for any other); Refused
        ("closed") once the exercise was revealed for this scenario."""
        key = (code, rules.exercise_name(exercise), rules.scenario_id(scenario))
        number, choice = (None, None) if value is None else rules.checked(value, options)
        with self._write() as db:
            self._open(db, code, now)
            seat = _seat(db, code, secret)
            if seat is None:
                raise Refused("seat_unknown", "no seat of the room holds this secret")
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

    def prediction(self, code: str, secret: str, exercise: str, scenario: str) -> Prediction | None:
        """The recorded prediction of the seat `secret` holds, or None."""
        rows = self._read(
            "SELECT p.number, p.choice FROM predictions p JOIN participants s "
            "ON s.room = p.room AND s.seat = p.seat WHERE p.room = ? AND p.exercise = ? "
            "AND p.scenario = ? AND s.secret_hash = ?",
            (code, exercise, rules.scenario_id(scenario), rules.key_hash(secret)),
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
                (
                    code,
                    rules.exercise_name(exercise),
                    rules.scenario_id(scenario),
                    number,
                    choice,
                    _now(now),
                ),
            )

    def revealed(self, code: str, exercise: str, scenario: str) -> tuple[bool, Prediction | None]:
        """(whether the exercise was revealed for this scenario, the answer kept then)."""
        rows = self._read(
            "SELECT number, choice FROM reveals WHERE room = ? AND exercise = ? AND scenario = ?",
            (code, exercise, rules.scenario_id(scenario)),
        )
        return (True, _value(rows[0])) if rows else (False, None)

    def tally(
        self,
        code: str,
        exercise: str,
        scenario: str,
        *,
        options: Sequence[str] = (),
        tolerance: float = WITHIN,
    ) -> Tally:
        """The room's predictions for the exercise and scenario, summarised (tally.summarise)."""
        params = (code, exercise, rules.scenario_id(scenario))
        rows = self._read(
            "SELECT number, choice FROM predictions WHERE room = ? AND exercise = ? "
            "AND scenario = ?",
            params,
        )
        (seated,) = self._read("SELECT COUNT(*) FROM participants WHERE room = ?", (code,))[0]
        revealed, answer = self.revealed(*params[:2], scenario)
        got = [v for v in map(_value, rows) if v is not None]  # the predictions
        return summarise(
            got, answer, tolerance, revealed=revealed, participants=seated, options=options
        )


def _seat(db: sqlite3.Connection, code: str, secret: str) -> str | None:
    """The seat whose secret's hash is `secret`'s, in room `code` (an ill-formed one: None)."""
    if not rules.well_formed(secret, rules.SECRET_LENGTH):
        return None
    row = db.execute(
        "SELECT seat FROM participants WHERE room = ? AND secret_hash = ?",
        (code, rules.key_hash(secret)),
    ).fetchone()
    return None if row is None else str(row[0])


def _value(row: tuple) -> Prediction | None:
    number, choice = row
    return choice if choice is not None else number


def _now(now: float | None) -> float:
    return time.time() if now is None else now
