"""SQLite's WAL checkpoints run in the store's own thread, not inside a commit, on a real
file: the automatic checkpoint is only a backstop, the thread checkpoints after writes,
ends when idle and starts again on the next write, and closing the store stops it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from hetsched.controlplane.storage import walmode
from hetsched.controlplane.storage.store import Store


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setattr(walmode, "_IDLE_S", 0.3)
    store = Store(f"sqlite:///{tmp_path / 'w.db'}")
    store.migrate()
    assert store.checkpointer is not None
    store.checkpointer.interval_s = 0.05
    try:
        yield store
    finally:
        store.close()


def _eventually(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


def _write(store: Store, count: int) -> None:
    for i in range(count):
        store.insert_job(f"j{i}-{time.monotonic_ns()}", "a", "default", "n", 0, {}, None, None)


def test_a_commit_checkpoints_only_past_the_backstop(store: Store) -> None:
    with store.read() as conn:
        assert conn.execute(text("PRAGMA wal_autocheckpoint")).scalar() == 10_000


def test_the_thread_checkpoints_after_writes_ends_when_idle_and_comes_back(store: Store) -> None:
    checkpointer = store.checkpointer
    assert checkpointer is not None
    for round_ in (1, 2):
        runs = checkpointer.runs
        _write(store, 20)
        _eventually(lambda runs=runs: checkpointer.runs > runs)
        # idle: the thread ends; its last checkpoint copied every frame of the WAL
        _eventually(lambda: checkpointer._thread is None)
        assert checkpointer.last is not None
        busy, frames, copied = checkpointer.last
        assert (busy, copied) == (0, frames) and frames > 0, round_


def test_closing_the_store_stops_the_thread(store: Store) -> None:
    checkpointer = store.checkpointer
    assert checkpointer is not None
    _write(store, 3)
    thread = checkpointer._thread
    assert thread is not None and thread.is_alive()
    store.close()
    assert not thread.is_alive()
    _write_after_close = checkpointer.wrote
    _write_after_close()  # a late write's notice starts nothing once closed
    assert checkpointer._thread is thread and not thread.is_alive()
