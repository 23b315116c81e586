"""SQLite as the service runs it: WAL mode, the ``synchronous`` level of each write, and
checkpoints kept off the commit path. Part of :class:`~hetsched.controlplane.storage.store.Store`.

Checkpoints: SQLite copies the WAL back into the database file (and flushes both) inside
whichever commit takes the WAL past ``wal_autocheckpoint`` pages, so every few hundred
commits one of them (a submission's, a turn's) took 5-15 ms more. Here a thread of the
store's own checkpoints (PASSIVE: it never waits for, nor blocks, a reader or a writer)
once a second after writes; the automatic checkpoint stays as a backstop at a WAL of
``_BACKSTOP_PAGES``, should that thread fall behind.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import Connection, Engine

from hetsched.controlplane.storage.health import unavailable

__all__ = ["Checkpointer", "restore_synchronous", "set_synchronous", "sqlite_pragmas"]

log = logging.getLogger(__name__)

#: WAL pages past which a commit checkpoints by itself (SQLite's default is 1,000)
_BACKSTOP_PAGES = 10_000
#: how long after a write the checkpointer runs (seconds)
_INTERVAL_S = 1.0
#: how long the checkpointer's thread waits for a write before it ends (seconds)
_IDLE_S = 30.0


def sqlite_pragmas(sync: str) -> Any:
    """The ``connect`` listener that sets up each new SQLite connection."""

    def connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={sync}")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA wal_autocheckpoint={_BACKSTOP_PAGES}")
        cursor.close()

    return connect


def set_synchronous(conn: Connection, level: str) -> None:
    # on the driver's connection: through SQLAlchemy the statement would begin a transaction
    driver = conn.connection.driver_connection
    assert driver is not None
    driver.execute(f"PRAGMA synchronous={level}")


def restore_synchronous(conn: Connection, level: str) -> None:
    """Put the connection back to ``level`` before the pool hands it out again; a
    connection that cannot be is discarded, never reused for a durable write."""
    try:
        set_synchronous(conn, level)
    except Exception:
        log.warning("could not restore synchronous=%s; connection discarded", level)
        conn.invalidate()


class Checkpointer:
    """Checkpoints the WAL from a thread of its own, ``_INTERVAL_S`` after writes."""

    def __init__(self, engine: Engine, interval_s: float = _INTERVAL_S) -> None:
        self.engine = engine
        self.interval_s = interval_s
        #: checkpoints run, and the last one's (busy, frames in the WAL, frames copied)
        self.runs = 0
        self.last: tuple[int, int, int] | None = None
        self._wrote = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    def wrote(self) -> None:
        """A write committed: checkpoint within the interval."""
        self._wrote.set()
        with self._guard:
            if self._closed.is_set() or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(
                target=self._run, name="hetsched-checkpoint", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        with self._guard:
            self._closed.set()
            thread = self._thread
        self._wrote.set()
        if thread is not None:
            thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            if not self._wrote.wait(_IDLE_S):
                # idle: the thread ends (the next write starts another), so a store nobody
                # closes leaves no thread behind for long
                with self._guard:
                    if not self._wrote.is_set():
                        self._thread = None
                        return
                continue
            if self._closed.wait(self.interval_s):
                return
            self._wrote.clear()
            try:
                self.checkpoint()
            except Exception as exc:  # retried after the next write; the backstop bounds it
                reason = unavailable(exc)
                if reason is None:
                    log.exception("WAL checkpoint failed")
                else:
                    log.warning("WAL checkpoint not done: %s", reason)

    def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: (busy, frames in the WAL, frames checkpointed)."""
        with self.engine.connect() as conn:
            driver = conn.connection.driver_connection
            assert driver is not None
            row = driver.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.last = (int(row[0]), int(row[1]), int(row[2]))
        self.runs += 1
        return self.last
