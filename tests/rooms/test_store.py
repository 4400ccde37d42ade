"""The rooms' store (pclab/rooms): store, replace, close, aggregate, expire, the limits and
the refusals, seats written only with their secret and issued at most so often per client,
against an in-memory SQLite database and a file (WAL), a file reopened as a restarted server
would, and a file an older lab made. Expected tallies are counted by hand from the
predictions sent."""

from __future__ import annotations

import sqlite3
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pclab.rooms import rules
from pclab.rooms.store import RoomStore
from pclab.rooms.tally import is_right, summarise

T0 = 1_800_000_000.0
SCENARIO = "(0.4, (2, 8, 'global_mean'))"


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    path = ":memory:" if request.param == "memory" else tmp_path / "rooms.sqlite3"
    opened = RoomStore(path, max_rooms=3, max_participants=4, lifetime_s=3600)
    yield opened
    opened.close()


def test_a_file_store_is_in_wal_mode(tmp_path):
    RoomStore(tmp_path / "rooms.sqlite3").close()
    with sqlite3.connect(tmp_path / "rooms.sqlite3") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_store_replace_and_withdraw(store):
    room = store.open_room(now=T0)
    seat = store.join(room.code, now=T0).secret
    store.predict(room.code, seat, "ledger_ex", SCENARIO, 0.3, now=T0)
    store.predict(room.code, seat, "ledger_ex", SCENARIO, 0.4, now=T0 + 1)  # replaces
    assert store.prediction(room.code, seat, "ledger_ex", SCENARIO) == 0.4
    assert store.tally(room.code, "ledger_ex", SCENARIO).numbers == (0.4,)
    other = "(0.5, (5, 8, 'global_mean'))"  # another scenario: its own prediction
    store.predict(room.code, seat, "ledger_ex", other, -1.0, now=T0)
    assert store.tally(room.code, "ledger_ex", SCENARIO).answered == 1
    store.predict(room.code, seat, "ledger_ex", SCENARIO, None, now=T0)  # cleared
    assert store.prediction(room.code, seat, "ledger_ex", SCENARIO) is None
    assert store.tally(room.code, "ledger_ex", other).numbers == (-1.0,)


def test_reveal_closes_the_exercise_and_grades_the_room(store):
    room = store.open_room(now=T0)
    seats = [store.join(room.code, now=T0).secret for _ in range(4)]
    for seat, guess in zip(seats, [0.4, 0.41, 0.43, -0.5]):
        store.predict(room.code, seat, "ledger_ex", SCENARIO, guess, now=T0)
    with pytest.raises(rules.Refused) as refused:
        store.reveal(room.code, "X" * rules.HOST_KEY_LENGTH, "ledger_ex", SCENARIO, 0.4)
    assert refused.value.reason == "not_presenter"
    before = store.tally(room.code, "ledger_ex", SCENARIO)
    assert (before.revealed, before.right, before.answer) == (False, None, None)
    store.reveal(room.code, room.host_key, "ledger_ex", SCENARIO, 0.4, now=T0)
    tally = store.tally(room.code, "ledger_ex", SCENARIO)
    # |0.43 - 0.4| = 0.03 > 0.02 = 5% of 0.4; 0.41 is inside, -0.5 far off.
    assert (tally.answered, tally.participants, tally.right, tally.answer) == (4, 4, 2, 0.4)
    with pytest.raises(rules.Refused) as refused:
        store.predict(room.code, seats[3], "ledger_ex", SCENARIO, 0.4, now=T0)
    assert refused.value.reason == "closed"
    store.reveal(room.code, room.host_key, "ledger_ex", SCENARIO, 99.0, now=T0)  # no change
    assert store.revealed(room.code, "ledger_ex", SCENARIO) == (True, 0.4)


def test_choices_are_counted_per_option_and_checked(store):
    room = store.open_room(now=T0)
    options = ("step", "skip")
    seats = [store.join(room.code, now=T0).secret for _ in range(3)]
    for seat, guess in zip(seats, ["skip", "skip", "step"]):
        store.predict(room.code, seat, "step_ex", "s", guess, options=options, now=T0)
    for bad in ("jump", "<b>skip</b>", 1.0, "Robert'); DROP TABLE rooms;--"):
        with pytest.raises(rules.Refused, match="one of"):
            store.predict(room.code, seats[0], "step_ex", "s", bad, options=options, now=T0)
    store.reveal(room.code, room.host_key, "step_ex", "s", "skip", now=T0)
    tally = store.tally(room.code, "step_ex", "s", options=options)
    assert tally.choices == (("step", 1), ("skip", 2)) and tally.right == 2


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "0.4", True, None])
def test_a_number_is_validated_as_the_page_validates_it(store, bad):
    room = store.open_room(now=T0)
    seat = store.join(room.code, now=T0).secret
    if bad is None:  # None is a withdrawal, not a value
        store.predict(room.code, seat, "ledger_ex", SCENARIO, bad, now=T0)
        return
    with pytest.raises(rules.Refused, match="finite number") as refused:
        store.predict(room.code, seat, "ledger_ex", SCENARIO, bad, now=T0)
    assert refused.value.reason == "invalid"


def test_rooms_expire_and_bad_codes_are_gone(store):
    room = store.open_room(now=T0)
    seat = store.join(room.code, now=T0).secret
    assert store.expires_at(room.code, now=T0) == T0 + 3600
    for code in ("K7QX", room.code.lower(), "' OR 1=1 --", room.code[:-1] + "0"):
        assert store.expires_at(code, now=T0) is None
        with pytest.raises(rules.Refused) as refused:
            store.join(code, now=T0)
        assert refused.value.reason == "gone"
    later = T0 + 3600
    assert store.expires_at(room.code, now=later) is None
    with pytest.raises(rules.Refused, match="expired"):
        store.predict(room.code, seat, "ledger_ex", SCENARIO, 0.4, now=later)
    assert not store.is_host(room.code, room.host_key, now=later)
    assert store.seat_of(room.code, seat, now=later) is None
    assert store.purge(now=later) == 1
    assert store.tally(room.code, "ledger_ex", SCENARIO).participants == 0


def test_caps_on_participants_and_rooms(store):
    rooms = [store.open_room(now=T0) for _ in range(3)]
    with pytest.raises(rules.Refused) as refused:
        store.open_room(now=T0)
    assert refused.value.reason == "server_full"
    code = rooms[0].code
    seats = [store.join(code, client=f"10.0.0.{i}", now=T0) for i in range(4)]
    # coming back (the secret) is not a new seat
    assert store.seat_of(code, seats[0].secret, now=T0) == seats[0].seat
    with pytest.raises(rules.Refused) as refused:
        store.join(code, client="10.0.0.9", now=T0)
    assert refused.value.reason == "room_full"
    assert store.open_room(now=T0 + 3600).code  # the expired ones make room


def test_a_restarted_server_keeps_the_room(tmp_path):
    path = tmp_path / "rooms.sqlite3"
    first = RoomStore(path)
    room = first.open_room()
    seat = first.join(room.code)
    first.predict(room.code, seat.secret, "ledger_ex", SCENARIO, 0.4)
    first.close()
    second = RoomStore(path)
    assert second.seat_of(room.code, seat.secret) == seat.seat
    assert second.prediction(room.code, seat.secret, "ledger_ex", SCENARIO) == 0.4
    assert second.is_host(room.code, room.host_key)
    second.close()


def test_two_connections_write_at_once(tmp_path):
    """Two stores on one file (two server processes, or the bench beside the server)."""
    path = tmp_path / "rooms.sqlite3"
    a, b = RoomStore(path), RoomStore(path)
    room = a.open_room()
    seats = [a.join(room.code, client=f"10.0.{i}.1").secret for i in range(40)]

    def answer(store, mine):
        for i, seat in enumerate(mine):
            store.predict(room.code, seat, "ledger_ex", SCENARIO, float(i))

    threads = [threading.Thread(target=answer, args=(s, seats[i::2])) for i, s in enumerate((a, b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert a.tally(room.code, "ledger_ex", SCENARIO).answered == 40
    a.close()
    b.close()


def test_a_seat_is_written_only_with_its_own_secret(store):
    """The seat id is public (the page's URL); the secret is the browser's. Neither a seat id,
    nor a made-up secret, nor another room's secret writes or reads a prediction."""
    room, other = store.open_room(now=T0), store.open_room(now=T0)
    mine, theirs = store.join(room.code, now=T0), store.join(other.code, now=T0)
    store.predict(room.code, mine.secret, "ledger_ex", SCENARIO, 0.4, now=T0)
    forged = [mine.seat, "2" * rules.SECRET_LENGTH, theirs.secret, mine.secret.lower(), ""]
    for secret in forged:
        with pytest.raises(rules.Refused) as refused:
            store.predict(room.code, secret, "ledger_ex", SCENARIO, 7.0, now=T0)
        assert refused.value.reason == "seat_unknown"
        assert store.seat_of(room.code, secret, now=T0) is None
        assert store.prediction(room.code, secret, "ledger_ex", SCENARIO) is None
    assert store.tally(room.code, "ledger_ex", SCENARIO).numbers == (0.4,)
    assert store.seat_of(room.code, mine.secret, now=T0) == mine.seat != theirs.seat


def test_the_database_keeps_hashes_and_buckets_never_secrets_or_addresses(tmp_path):
    path = tmp_path / "rooms.sqlite3"
    store = RoomStore(path)
    room = store.open_room()
    seat = store.join(room.code, client="198.51.100.7")
    store.close()
    dump = "\n".join(sqlite3.connect(path).iterdump())
    assert seat.secret not in dump and room.host_key not in dump
    assert "198.51.100" not in dump
    (bucket,) = sqlite3.connect(path).execute("SELECT client FROM participants").fetchone()
    assert len(bucket) == rules.CLIENT_BUCKET_HEX


def test_one_client_takes_at_most_its_share_of_a_room():
    """A script from one address fills its share and no more: the room still seats others."""
    store = RoomStore(":memory:", max_participants=10, max_per_client=3)
    code = store.open_room(now=T0).code
    flood = []
    for _ in range(8):
        try:
            flood.append(store.join(code, client="203.0.113.5", now=T0))
        except rules.Refused as refused:
            assert refused.reason == "client_full"
    assert len(flood) == 3
    v6 = [rules.client_of(f"2001:db8:1:2::{i:x}") for i in range(5)]  # one /64: one client
    assert len(set(v6)) == 1 and rules.client_of("2001:db8:1:3::1") != v6[0]
    assert rules.client_of(None) == "local" and rules.client_of("::ffff:10.1.2.3") == "10.1.2.3"
    others = [store.join(code, client=f"198.51.100.{i}", now=T0) for i in range(7)]
    assert len({s.seat for s in flood + others}) == 10
    with pytest.raises(rules.Refused, match="room_full"):
        store.join(code, client="198.51.100.200", now=T0)


def test_a_database_made_before_seats_had_secrets_is_brought_up_to_date(tmp_path):
    path = tmp_path / "rooms.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(
            "CREATE TABLE rooms (code TEXT PRIMARY KEY, host_hash TEXT NOT NULL, "
            "opened_at REAL NOT NULL, expires_at REAL NOT NULL);"
            "CREATE TABLE participants (room TEXT NOT NULL REFERENCES rooms(code) "
            "ON DELETE CASCADE, seat TEXT NOT NULL, joined_at REAL NOT NULL, "
            "PRIMARY KEY (room, seat));"
        )
        key = "K" * rules.HOST_KEY_LENGTH
        db.execute("INSERT INTO rooms VALUES ('K7QXM2PA', ?, ?, ?)", (rules.key_hash(key), 0, 9e9))
        db.execute("INSERT INTO participants VALUES ('K7QXM2PA', '2222222222222222', 0)")
    store = RoomStore(path)
    assert store.is_host("K7QXM2PA", key)  # the room survived
    seat = store.join("K7QXM2PA", client="198.51.100.7")  # new seats work
    store.predict("K7QXM2PA", seat.secret, "ledger_ex", SCENARIO, 0.4)
    assert store.tally("K7QXM2PA", "ledger_ex", SCENARIO).participants == 2
    store.close()
    RoomStore(path).close()  # a second start finds nothing left to add


def test_the_codes_are_drawn_from_the_alphabet():
    codes = {rules.token(rules.CODE_LENGTH) for _ in range(2000)}
    assert len(codes) == 2000
    assert all(rules.well_formed(c, rules.CODE_LENGTH) for c in codes)
    assert len(rules.ALPHABET) ** rules.CODE_LENGTH > 6e11


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6), max_size=30),
    st.floats(-1e6, 1e6).filter(lambda a: abs(a) > 1e-9),
)
def test_within_five_percent_against_a_direct_count(guesses, answer):
    tally = summarise(guesses, answer, revealed=True)
    assert tally.right == len([g for g in guesses if abs(g - answer) <= 0.05 * abs(answer)])
    assert tally.numbers == tuple(sorted(guesses)) and tally.answered == len(guesses)


def test_an_exercises_own_tolerance_counts_in_the_tally():
    """The page's rule and the room's are one (is_right): 5 % by default, exact for a count."""
    assert is_right(-0.51, -0.5) and not is_right(-0.6, -0.5)
    assert not is_right(139.0, 140, 0.0) and is_right(140.0, 140, 0.0)
    assert summarise([139.0, 140.0], 140, revealed=True).right == 2  # within 5 %
    assert summarise([139.0, 140.0], 140, revealed=True, tolerance=0.0).right == 1


def test_an_undefined_answer_makes_every_number_wrong():
    assert summarise([0.0, 1.0], None, revealed=True).right == 0
    assert is_right(0.0, 0.0) and not is_right(1e-12, 0.0)
