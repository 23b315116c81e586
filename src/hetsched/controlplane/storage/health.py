"""Whether the store can be written, and what a store error means.

A store error is one of three things, and each is handled differently:

- the store is *unavailable* (:func:`unavailable`): the disk is full, the filesystem turned
  read-only, the database server is stopped, restarting or unreachable, or the database
  stayed locked too long. Nothing about any job is wrong: the reconcile loop pauses and
  keeps what it has not written, the API answers ``503`` with the reason and
  ``Retry-After``, and everything resumes by itself when a write succeeds again;
- the store is *damaged* (:func:`damaged`): SQLite found a malformed page. What touches
  it answers ``503`` naming it; the operator restores a backup (docs/operations.md);
- anything else (a constraint the core should have kept) is a failed turn
  (``controlplane/faults.py``).

:class:`StoreHealth` is the one record of the store's state, written by whoever meets an
error (the loop, a route) or sees a write succeed again (the loop's probe), read by
``/healthz``, ``/readyz``, the alerts and the metrics. Thread-safe.
"""

from __future__ import annotations

import errno
import threading
import time
from dataclasses import dataclass

from sqlalchemy.engine import URL

__all__ = ["StoreHealth", "damaged", "unavailable", "where"]

#: errno values of an unwritable disk
_DISK_ERRNOS = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only filesystem",
    errno.EIO: "disk I/O error",
}
#: SQLite's messages for the same (sqlite3.OperationalError carries no errno)
_SQLITE_MESSAGES = (
    ("database or disk is full", "disk full"),
    ("attempt to write a readonly database", "read-only filesystem"),
    ("readonly database", "read-only filesystem"),
    ("disk i/o error", "disk I/O error"),
    ("unable to open database file", "cannot open the database file"),
    ("database is locked", "database locked"),
)
#: PostgreSQL SQLSTATE classes of an unavailable server: connection exceptions (08),
#: insufficient resources (53: disk full, out of memory), operator intervention (57P:
#: shutdown, restart, not accepting connections), a read-only transaction (25006: the
#: name now points to a replica after a failover)
_PG_STATES = ("08", "53", "57P", "25006")
_DAMAGED = ("database disk image is malformed", "file is not a database", "malformed")


def where(url: URL) -> str:
    """What an unavailable store's reason names: the SQLite file, or the server (never
    the password)."""
    if url.get_backend_name() == "sqlite":
        return url.database or "memory"
    return f"{url.get_backend_name()} at {url.host}:{url.port or 5432}/{url.database}"


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (``orig`` of a SQLAlchemy error, causes, contexts)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 10:
        item = todo.pop()
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        orig = getattr(item, "orig", None)
        todo += [orig if isinstance(orig, BaseException) else None, item.__cause__]
        todo.append(item.__context__)
    return seen


def unavailable(exc: BaseException) -> str | None:
    """Why the store cannot be used now, if ``exc`` says it cannot (else None)."""
    for item in _chain(exc):
        if isinstance(item, OSError) and item.errno in _DISK_ERRNOS:
            return _DISK_ERRNOS[item.errno]
        message = str(item).lower()
        module = type(item).__module__
        if module.startswith("sqlite3"):
            for text, reason in _SQLITE_MESSAGES:
                if text in message:
                    return reason
        if module.startswith("psycopg"):
            state = getattr(item, "sqlstate", None)
            if state is None and type(item).__name__ in ("OperationalError", "InterfaceError"):
                return "database server unreachable"
            if state is not None and state.startswith(_PG_STATES):
                return f"database server unavailable ({state})"
        if getattr(item, "connection_invalidated", False):
            return "database connection lost"
    return None


def damaged(exc: BaseException) -> str | None:
    """What SQLite says is damaged, if ``exc`` says so (else None)."""
    for item in _chain(exc):
        if type(item).__module__.startswith("sqlite3"):
            message = str(item)
            if any(text in message.lower() for text in _DAMAGED):
                return message
    return None


@dataclass(frozen=True, slots=True)
class Outage:
    """The store's state while it cannot be written."""

    reason: str
    since: float


class StoreHealth:
    """The store's state: up, or unavailable since when and why (see the module
    docstring)."""

    def __init__(self, where: str) -> None:
        #: what the reasons name: the database file, or the server
        self.where = where
        self._lock = threading.Lock()
        self._outage: Outage | None = None
        #: errors that made the store unavailable, and outages begun (the metrics)
        self.failures = 0
        self.outages = 0
        #: the store's last damage reported, if any
        self.damage: str | None = None

    @property
    def outage(self) -> Outage | None:
        with self._lock:
            return self._outage

    def failed(self, exc: BaseException) -> str | None:
        """Note ``exc`` if it says the store is unavailable or damaged; returns the reason
        as an answer gives it ("store unavailable: disk full on <file>"), else None."""
        reason = unavailable(exc)
        if reason is None:
            damage = damaged(exc)
            if damage is None:
                return None
            with self._lock:
                self.damage = damage
            return f"store damaged: {damage} ({self.where}); restore a backup"
        return self.down(reason)

    def down(self, reason: str) -> str:
        """The store is unavailable for ``reason``; returns the reason as answers say it."""
        said = f"store unavailable: {reason} on {self.where}"
        with self._lock:
            self.failures += 1
            if self._outage is None:
                self.outages += 1
                self._outage = Outage(said, time.time())
            elif self._outage.reason != said:
                self._outage = Outage(said, self._outage.since)
        return said

    def up(self) -> Outage | None:
        """A write succeeded: the outage that ended, if there was one."""
        with self._lock:
            ended, self._outage = self._outage, None
        return ended

    def to_dict(self) -> dict[str, object]:
        outage = self.outage
        return {
            "ok": outage is None and self.damage is None,
            "where": self.where,
            "reason": outage.reason if outage is not None else self.damage,
            "since": outage.since if outage is not None else None,
            "failures": self.failures,
        }
