"""The rooms' tables, in one SQLite file: rooms (a code, the presenter key's hash, a salt),
participants (a seat, its secret's hash, its client's bucket), predictions and reveals.
`create` makes them, and brings a database an older lab made up to date in place.

    python -c "from pclab.rooms.schema import SCHEMA; print(SCHEMA)"
"""

from __future__ import annotations

import sqlite3

from pclab.rooms.rules import token

SCHEMA = """
CREATE TABLE IF NOT EXISTS rooms (
    code TEXT PRIMARY KEY, host_hash TEXT NOT NULL,
    opened_at REAL NOT NULL, expires_at REAL NOT NULL, salt TEXT);
CREATE TABLE IF NOT EXISTS participants (
    room TEXT NOT NULL REFERENCES rooms(code) ON DELETE CASCADE,
    seat TEXT NOT NULL, joined_at REAL NOT NULL, secret_hash TEXT, client TEXT,
    PRIMARY KEY (room, seat));
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
# Columns a database made before seats had secrets lacks (added in place: its rooms stay; its
# old seats hold no secret, so no browser can claim them and their owners get new ones).
ADDED = {
    "rooms": ("salt TEXT",),
    "participants": ("secret_hash TEXT", "client TEXT"),
}
SALT_LENGTH = 24  # a room's key for its clients' buckets (rules.client_bucket)
INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS seat_by_secret ON participants (room, secret_hash);
CREATE INDEX IF NOT EXISTS seats_by_client ON participants (room, client);
"""


def create(db: sqlite3.Connection) -> None:
    """The tables and indexes, on a new database or an older one: the columns it lacks
    (`ADDED`) are added, and a room without a salt gets one."""
    db.executescript(SCHEMA)
    for table, columns in ADDED.items():
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column in columns:
            if column.split()[0] in have:
                continue
            try:  # names from ADDED only, never input
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
            except sqlite3.OperationalError as error:  # another server added it meanwhile
                if "duplicate column" not in str(error):
                    raise
    for (code,) in db.execute("SELECT code FROM rooms WHERE salt IS NULL").fetchall():
        db.execute("UPDATE rooms SET salt = ? WHERE code = ?", (token(SALT_LENGTH), code))
    db.executescript(INDEXES)
