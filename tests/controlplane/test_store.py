"""The store on a real SQLite file and on a real PostgreSQL server."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import bindparam, text
from sqlalchemy.exc import IntegrityError

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.controlplane.launcher import Launched
from hetsched.controlplane.planner import TurnPlan
from hetsched.controlplane.storage.store import Conflict, NewJob, Store
from hetsched.controlplane.storage.tables import allocations, jobs, metadata
from hetsched.drivers import Exit, Start, Stop
from hetsched.keys import TaskKey


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


def test_the_writer_hands_each_new_job_on_once_committed(store: Store) -> None:
    """``on_commit`` runs before the caller returns, after the row is committed (another
    connection reads it), once per new job; a replayed key hands nothing on."""
    handed: list[tuple[str, bool]] = []

    def on_commit(row: dict) -> None:
        with store.engine.connect() as other:
            seen = other.execute(text("SELECT id FROM jobs WHERE id = :i"), {"i": row["id"]})
            handed.append((row["id"], seen.scalar() == row["id"]))

    cases = [("j1", "k1", True), ("j2", "k1", False), ("j3", None, True), ("j4", "k2", True)]
    for job_id, key, created in cases:
        before = list(handed)
        _row, was_created = store.insert_job(
            job_id, "alice", "default", "n", 0, {"name": "n"}, key, "d1", on_commit=on_commit
        )
        assert was_created is created
        assert handed == ([*before, (job_id, True)] if created else before)
    assert [job for job, _ in handed] == ["j1", "j3", "j4"]


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


def _counted(store: Store) -> dict[tuple[str, str], int]:
    return {(u["queue"], u["state"]): u["count"] for u in store.queue_usage()}


def _scanned(store: Store) -> dict[tuple[str, str], int]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT queue, state, COUNT(*) FROM jobs GROUP BY queue, state")
        ).all()
    return {(q, s): int(n) for q, s, n in rows}


def test_job_counts_follow_every_insert_and_change_of_state(store: Store) -> None:
    """The counts ``/v1/queues`` reads are kept by triggers, whichever way a job row is
    written: single and batch submissions, a turn's executemany, a plain UPDATE, a
    state written again unchanged, a move to another queue."""
    _insert(store, "j1", None)
    _insert(store, "j2", "k")
    store.insert_jobs(
        [NewJob(f"b{i}", "bob", "q2" if i % 2 else "default", "n", 0, {}) for i in range(5)],
        "batch",
        "d",
    )
    assert _counted(store) == {("default", "pending"): 5, ("q2", "pending"): 2}
    with store.write() as conn:
        conn.execute(
            jobs.update().where(jobs.c.id == bindparam("b_id")).values(state=bindparam("v")),
            [{"b_id": "j1", "v": "running"}, {"b_id": "b1", "v": "succeeded"}],
        )
        conn.execute(text("UPDATE jobs SET state = state"))  # no change: nothing counted
        conn.execute(text("UPDATE jobs SET queue = 'q3' WHERE id = 'b2'"))
    assert store.end_waiting_job("j2", "cancelled", "held", time.time())
    assert _counted(store) == _scanned(store)
    assert _counted(store) == {
        ("default", "cancelled"): 1,
        ("default", "pending"): 2,
        ("default", "running"): 1,
        ("q2", "pending"): 1,
        ("q2", "succeeded"): 1,
        ("q3", "pending"): 1,
    }
    with pytest.raises(IntegrityError), store.write() as conn:
        conn.execute(text("UPDATE jobs SET state = 'failed' WHERE id = 'j1'"))
        conn.execute(text("INSERT INTO tokens (id) VALUES (NULL)"))  # the transaction fails
    assert _counted(store) == _scanned(store)  # and its counts are rolled back with it


def test_job_counts_are_kept_by_triggers_after_every_migration(store: Store) -> None:
    """SQLite drops a table's triggers when a migration rebuilds the table: whatever
    migration comes last, the triggers must be there."""
    with store.engine.connect() as conn:
        if store.sqlite:
            query = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        else:
            query = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
        names = {r[0] for r in conn.execute(text(query)).all()}
    assert {"job_counts_update"} <= names
    assert len([n for n in names if n.startswith("job_counts_")]) >= 2


def test_concurrent_writers_keep_the_counts(store: Store) -> None:
    """Submissions (grouped and batched) and state changes from several threads at once:
    no deadlock, no lost count."""

    def single(i: int) -> None:
        for k in range(10):
            _insert(store, f"s{i}-{k}", None)

    def batch(i: int) -> None:
        for k in range(3):
            queue_of = ["qa", "qb"] if (i + k) % 2 else ["qb", "qa"]
            items = [NewJob(f"b{i}-{k}-{n}", "bob", queue_of[n % 2], "x", 0, {}) for n in range(6)]
            store.insert_jobs(items, None, None)

    def turns() -> None:
        for _ in range(10):
            with store.write() as conn:
                conn.execute(
                    text(
                        "UPDATE jobs SET state = 'running' WHERE seq IN "
                        "(SELECT seq FROM jobs WHERE state = 'pending' ORDER BY seq DESC LIMIT 3)"
                    )
                )

    threads = [threading.Thread(target=single, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=batch, args=(i,)) for i in range(4)]
    threads.append(threading.Thread(target=turns))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _counted(store) == _scanned(store)
    assert sum(_counted(store).values()) == 4 * 10 + 4 * 3 * 6


def test_a_turn_with_several_starts_stops_launches_and_exits_is_recorded(store: Store) -> None:
    """Each kind of row a turn writes goes in as one statement for many rows: two of each
    in one turn, then two more turns that stop, launch and end them."""
    for job_id in ("a", "b"):
        _insert(store, job_id, None)
    keys = [TaskKey("a", 0, 1), TaskKey("b", 0, 1)]
    places = [
        Placement("n", 1000, 64, (DeviceShare("n/gpu0", 1000),)),
        Placement("n", 1000, 64, (DeviceShare("n/gpu1", 500),)),
    ]
    plan = TurnPlan(10.0, starts=[Start(k, p) for k, p in zip(keys, places, strict=True)])
    plan.preempted = ["a", "b"]
    store.record_turn([], plan)
    assert {(t["job_id"], t["state"]) for t in store.tasks_in(["starting"])} == {
        ("a", "starting"),
        ("b", "starting"),
    }
    assert {a["device_id"] for a in store.live_allocations()} == {"n/gpu0", "n/gpu1"}
    store.record_launched([Launched(k, 100 + i, 5.0, 11.0) for i, k in enumerate(keys)])
    assert sorted(t["pid"] for t in store.tasks_in(["running"])) == [100, 101]
    stops = [Stop(k, p, 0.0, 5.0, "preempted") for k, p in zip(keys, places, strict=True)]
    store.record_turn([], TurnPlan(12.0, stops=stops))
    assert len(store.tasks_in(["stopping"])) == 2
    exits = [Exit.of(k.job, k.task, k.run, 0, True, "stopped") for k in keys]
    store.record_turn(exits, TurnPlan(13.0))
    assert len(store.tasks_in(["stopped"])) == 2
    assert store.live_allocations() == []
    assert {j["id"]: j["preemptions"] for j in store.jobs_by_ids(["a", "b"])} == {"a": 1, "b": 1}
