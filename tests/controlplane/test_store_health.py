"""What a store error means (``storage/health.py``): an outage of the store (disk full,
read-only, locked, the server unreachable), a damaged store, or neither (a turn that fails
because of a job, such as a foreign key the core should have kept). Each error is made
for real where the machine allows it (SQLite's own messages, a refused connection to a
closed port), so a change of wording upstream shows here."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError as SaOperationalError

from hetsched.controlplane import free_port
from hetsched.controlplane.storage.health import StoreHealth, damaged, unavailable


def _error_of(run: Callable[[], object]) -> BaseException:
    try:
        run()
    except Exception as exc:
        return exc
    raise AssertionError("no error")


def test_a_full_sqlite_store_through_sqlalchemy_is_disk_full(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'full.db'}")

    def fill() -> None:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x TEXT)"))
            conn.execute(text("PRAGMA max_page_count = 4"))
            for _ in range(100):
                conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": "x" * 2000})

    exc = _error_of(fill)
    assert isinstance(exc, SaOperationalError)
    assert unavailable(exc) == "disk full"
    assert damaged(exc) is None


def test_a_read_only_sqlite_store_is_read_only(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "ro.db").execute("CREATE TABLE t (x)").connection.close()
    db = sqlite3.connect(f"file:{tmp_path / 'ro.db'}?mode=ro", uri=True)
    exc = _error_of(lambda: db.execute("INSERT INTO t VALUES (1)"))
    db.close()
    assert unavailable(exc) == "read-only filesystem"


def test_a_store_locked_by_another_writer_is_locked(tmp_path: Path) -> None:
    holder = sqlite3.connect(tmp_path / "lock.db", isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(tmp_path / "lock.db", timeout=0, isolation_level=None)
    exc = _error_of(lambda: other.execute("INSERT INTO t VALUES (1)"))
    holder.close()
    other.close()
    assert unavailable(exc) == "database locked"


def test_a_foreign_key_a_turn_broke_is_neither_an_outage_nor_damage(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "fk.db")
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY)")
    db.execute("CREATE TABLE tasks (job_id TEXT REFERENCES jobs (id))")
    exc = _error_of(lambda: db.execute("INSERT INTO tasks VALUES ('j-missing')"))
    db.close()
    assert isinstance(exc, sqlite3.IntegrityError)
    assert unavailable(exc) is None and damaged(exc) is None


def test_a_damaged_page_is_damage_not_an_outage(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x TEXT)")
    db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 200)
    db.commit()
    db.close()
    with open(path, "r+b") as out:  # the table's root page (page 2) overwritten
        out.seek(4096)
        out.write(b"\xff" * 4096)
    db = sqlite3.connect(path)
    exc = _error_of(lambda: db.execute("SELECT count(*) FROM t").fetchall())
    db.close()
    assert unavailable(exc) is None
    assert damaged(exc) == "database disk image is malformed"


def test_a_postgresql_server_that_refuses_connections_is_unreachable() -> None:
    port = free_port()  # nothing listens there
    exc = _error_of(
        lambda: psycopg.connect(f"host=127.0.0.1 port={port} user=x dbname=x connect_timeout=5")
    )
    assert unavailable(exc) == "database server unreachable"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.ENOSPC, "disk full"),
        (errno.EDQUOT, "disk quota exceeded"),
        (errno.EROFS, "read-only filesystem"),
        (errno.EIO, "disk I/O error"),
        (errno.ENOENT, None),
        (errno.EACCES, None),
    ],
)
def test_an_os_error_inside_another_error_is_read_by_its_errno(code: int, reason: str) -> None:
    def wrapped() -> None:
        try:
            raise OSError(code, "from the disk")
        except OSError as inner:
            raise RuntimeError("writing the exit file") from inner

    assert unavailable(_error_of(wrapped)) == reason


def test_store_health_counts_errors_and_outages_and_keeps_when_one_began() -> None:
    health = StoreHealth("/var/lib/hetsched/hetsched.db")
    assert health.to_dict()["ok"] is True
    said = health.down("disk full")
    assert said == "store unavailable: disk full on /var/lib/hetsched/hetsched.db"
    first = health.outage
    assert first is not None
    health.down("disk full")
    health.down("read-only filesystem")  # the same outage, its reason updated
    outage = health.outage
    assert outage is not None and outage.since == first.since
    assert outage.reason.startswith("store unavailable: read-only filesystem")
    assert (health.failures, health.outages) == (3, 1)
    assert health.up() == outage and health.outage is None
    assert health.up() is None  # a write with no outage ends nothing
    health.down("database locked")
    assert (health.failures, health.outages) == (4, 2)
    state = health.to_dict()
    assert state["ok"] is False and state["failures"] == 4
    assert state["reason"] == "store unavailable: database locked on /var/lib/hetsched/hetsched.db"


def test_a_failed_write_says_outage_or_damage_and_ignores_anything_else() -> None:
    health = StoreHealth("db")
    assert health.failed(ValueError("a bug")) is None
    assert health.outage is None and health.to_dict()["ok"] is True
    malformed = sqlite3.DatabaseError("database disk image is malformed")
    assert health.failed(malformed) == (
        "store damaged: database disk image is malformed (db); restore a backup"
    )
    assert health.outage is None and health.to_dict()["ok"] is False  # damaged, not down
    assert health.failed(OSError(errno.ENOSPC, "full")) == "store unavailable: disk full on db"
    assert health.outage is not None
