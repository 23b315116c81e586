"""The store on a real SQLite file and on a real PostgreSQL server."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from hetsched.service.store import Conflict, Store
from hetsched.service.tables import allocations, metadata


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'test.db'}"
    else:
        base = request.getfixturevalue("postgres_url")
        schema_db = f"t{uuid.uuid4().hex[:10]}"
        admin = Store(base)
        with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"CREATE DATABASE {schema_db}"))
        admin.close()
        url = base.rsplit("/", 1)[0] + "/" + schema_db
    store = Store(url)
    store.migrate()
    try:
        yield store
    finally:
        store.close()


def test_migrations_create_exactly_the_tables(store: Store) -> None:
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []
    store.migrate()  # idempotent


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'wal.db'}")
    store.migrate()
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL
    store.close()


def test_tokens_are_stored_as_digests(store: Store) -> None:
    token_id, token = store.create_token("alice")
    principal = store.principal(token)
    assert principal is not None and principal.user == "alice" and not principal.admin
    with store.engine.connect() as conn:
        dump = " ".join(str(r) for r in conn.execute(text("SELECT * FROM tokens")).all())
    assert token not in dump
    assert store.revoke_token(token_id)
    assert store.principal(token) is None


def _insert(
    store: Store, job_id: str, key: str | None, digest: str | None = "d1"
) -> tuple[dict, bool]:
    return store.insert_job(job_id, "alice", "default", "n", 0, {"name": "n"}, key, digest)


def test_an_idempotency_key_returns_the_first_job(store: Store) -> None:
    _first, created = _insert(store, "j1", "key")
    again, created_again = _insert(store, "j2", "key")
    assert created and not created_again and again["id"] == "j1"
    with pytest.raises(Conflict):
        _insert(store, "j3", "key", digest="other")
    assert [j["id"] for j in store.list_jobs(include_terminal=True)] == ["j1"]


def test_concurrent_retries_of_one_request_create_one_job(store: Store) -> None:
    results: list[str] = []

    def submit(i: int) -> None:
        row, _ = _insert(store, f"j{i}", "same")
        results.append(row["id"])

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    assert len(store.list_jobs(include_terminal=True)) == 1


def test_a_device_cannot_hold_two_live_whole_allocations(store: Store) -> None:
    _insert(store, "j1", None)
    _insert(store, "j2", None)
    now = time.time()
    row = {"task": 0, "run": 1, "device_id": "n/gpu0", "share": 1000, "allocated_at": now}
    with store.write() as conn:
        conn.execute(allocations.insert().values(job_id="j1", live=True, **row))
    with pytest.raises(IntegrityError), store.write() as conn:
        conn.execute(allocations.insert().values(job_id="j2", live=True, **row))
    # released allocations do not count, and shares below a whole device may coexist
    with store.write() as conn:
        conn.execute(allocations.update().values(live=None, released_at=now))
        conn.execute(allocations.insert().values(job_id="j2", live=True, **row))
        half = {**row, "device_id": "n/gpu1", "share": 500}
        conn.execute(allocations.insert().values(job_id="j1", live=True, **half))
        conn.execute(allocations.insert().values(job_id="j2", live=True, **half))
    assert len(store.allocation_history()) == 4


def test_cancel_requests_only_touch_live_jobs(store: Store) -> None:
    _insert(store, "j1", None)
    assert store.request_cancel("j1")
    with store.write() as conn:
        conn.execute(text("UPDATE jobs SET state = 'succeeded'"))
    assert not store.request_cancel("j1")
    assert store.live_jobs() == []
