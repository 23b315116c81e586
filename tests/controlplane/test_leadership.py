"""The lease of a standby pair in the store: taken when missing or expired with the epoch
raised by one, never by two processes for one epoch, renewed only by its holder at its
epoch, and a write of a leader whose lease another took is refused (fenced), on SQLite and
PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from hetsched.controlplane.leadership import Fenced, Keeper, LeaseBook
from hetsched.controlplane.storage.store import Store
from pg_fixture import new_database

LEASE_S = 10.0


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    return new_database(request.getfixturevalue("postgres_url"), "l")


@pytest.fixture
def stores(url: str) -> Iterator[tuple[Store, Store]]:
    """Two stores on one database: two processes of a pair."""
    first, second = Store(url), Store(url)
    first.migrate()
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def test_a_lease_is_taken_once_and_taken_over_only_when_expired(
    stores: tuple[Store, Store],
) -> None:
    a = LeaseBook(stores[0], "cp", "a", "https://a:8780", LEASE_S)
    b = LeaseBook(stores[1], "cp", "b", "https://b:8780", LEASE_S)
    held = a.take(now=1000.0)
    assert held is not None and held.epoch == 1 and held.holder == "a"
    assert b.take(now=1005.0) is None  # unexpired
    assert a.renew(now=1008.0)  # now until 1018
    assert b.take(now=1017.9) is None
    current = b.current()
    assert current is not None and current.url == "https://a:8780"
    taken = b.take(now=1018.1)
    assert taken is not None and taken.epoch == 2 and taken.holder == "b"
    assert not a.renew(now=1019.0)  # the old leader cannot extend it
    assert a.take(now=1019.0) is None  # nor take it back while b holds it
    assert b.renew(now=1020.0)


def test_a_write_of_a_leader_whose_lease_was_taken_over_is_refused(
    stores: tuple[Store, Store],
) -> None:
    a = LeaseBook(stores[0], "cp", "a", "https://a", LEASE_S)
    b = LeaseBook(stores[1], "cp", "b", "https://b", LEASE_S)
    assert a.take(now=1000.0) is not None
    stores[0].fence = a.fence
    stores[0].create_token("alice")  # the leader writes while it holds the lease
    assert b.take(now=2000.0) is not None
    stores[1].fence = b.fence
    with pytest.raises(Fenced, match="held by b at epoch 2, not by us at epoch 1"):
        stores[0].create_token("mallory")
    stores[1].create_token("bob")
    owners = {t["owner"] for t in stores[1].list_tokens()}
    assert owners == {"alice", "bob"}  # the fenced write left nothing


def test_contenders_for_an_expired_lease_take_each_epoch_once(url: str) -> None:
    """Eight processes race for the lease, again and again as it expires: every epoch has
    exactly one holder, and epochs rise by one."""
    stores = [Store(url) for _ in range(8)]
    stores[0].migrate()
    books = [LeaseBook(s, "cp", f"p{i}", "u", LEASE_S) for i, s in enumerate(stores)]
    winners: list[tuple[int, str]] = []
    lock = threading.Lock()
    try:
        for round_ in range(5):
            now = 1000.0 + round_ * (LEASE_S + 1)
            gate = threading.Barrier(len(books))

            def race(book: LeaseBook, at: float = now, barrier: threading.Barrier = gate) -> None:
                barrier.wait()
                held = book.take(now=at)
                if held is not None:
                    with lock:
                        winners.append((held.epoch, held.holder))

            threads = [threading.Thread(target=race, args=(b,)) for b in books]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        for store in stores:
            store.close()
    assert [epoch for epoch, _ in winners] == [1, 2, 3, 4, 5]


def test_the_keeper_steps_down_when_another_took_the_lease(stores: tuple[Store, Store]) -> None:
    a = LeaseBook(stores[0], "cp", "a", "https://a", 0.6)
    assert a.take() is not None
    lost: list[str] = []
    done = threading.Event()
    keeper = Keeper(a, lambda why: (lost.append(why), done.set()))
    keeper.start()
    # another process takes the lease under a later epoch (as after an expiry)
    b = LeaseBook(stores[1], "cp", "b", "https://b", 60.0)
    assert b.take(now=10**10) is not None
    assert done.wait(10)
    keeper.stop()
    assert lost == ["lease cp: another process took it over"]


def test_the_keeper_steps_down_when_the_store_refuses_its_renewals(tmp_path: Path) -> None:
    """A leader that cannot write its renewal (its store unreachable, full) steps down
    while the lease it last wrote still runs: a standby never takes over from a leader
    that might still start tasks."""
    store = Store(f"sqlite:///{tmp_path / 'lease.db'}")
    store.migrate()
    try:
        a = LeaseBook(store, "cp", "a", "https://a", 0.9)
        held = a.take()
        assert held is not None
        with store.engine.begin() as conn:  # SQLite's own error for a full disk
            conn.execute(
                text(
                    "CREATE TRIGGER full BEFORE UPDATE ON leases "
                    "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
                )
            )
        lost: list[str] = []
        done = threading.Event()
        keeper = Keeper(a, lambda why: (lost.append(why), done.set()))
        keeper.start()
        assert done.wait(10)
        keeper.stop()
        assert lost == ["lease cp: not renewed in time"]
        assert keeper.valid_until == pytest.approx(held.expires_at, abs=0.5)  # never renewed
        assert a.current() == held  # the lease as the leader last wrote it
    finally:
        store.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('lease') / 'lease.db'}")
    store.migrate()
    yield store
    store.close()


_OPS = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.sampled_from(["take", "renew", "release"]),
        st.floats(0.0, 2 * LEASE_S),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS)
def test_any_sequence_of_takes_renewals_and_releases_keeps_one_writer(
    shared: Store, ops: list[tuple[int, str, float]]
) -> None:
    """Three processes take, renew and release one lease in any order at any times: a take
    succeeds exactly when the lease is missing or expired, and raises the epoch by one;
    a renewal or release counts only from the holder at its epoch; and at every moment
    exactly the holder's writes pass the fence (none before the first take)."""
    name = f"p{uuid.uuid4().hex[:12]}"
    books = [LeaseBook(shared, name, f"h{i}", f"u{i}", LEASE_S) for i in range(3)]
    holder, epoch, expires, now = None, 0, 0.0, 1000.0
    for who, op, wait in ops:
        now += wait
        book = books[who]
        mine = holder == who and book.epoch == epoch
        if op == "take":
            held = book.take(now=now)
            if holder is None or expires <= now:
                assert held is not None and held.epoch == epoch + 1
                holder, epoch, expires = who, epoch + 1, now + LEASE_S
            else:
                assert held is None
        elif op == "renew":
            assert book.renew(now=now) == mine
            expires = now + LEASE_S if mine else expires
        else:
            book.release(now=now)
            expires = now if mine else expires
        writers = []
        for index, other in enumerate(books):
            with shared.write() as conn:
                try:
                    other.fence(conn)
                    writers.append(index)
                except Fenced:
                    pass
        expected = [holder] if holder is not None and books[holder].epoch == epoch else []
        assert writers == expected
