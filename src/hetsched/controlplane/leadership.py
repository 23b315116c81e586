"""Leading a standby pair: two ``hetsched up`` on one PostgreSQL, one leading under a lease
kept in the store (``leases``), the other waiting to take over.

Contracts:
- One row per lease name: its holder, its epoch, the holder's URL and when it expires.
  :meth:`LeaseBook.take` takes an expired (or missing) lease with one conditional
  statement that compares the epoch it read and raises it by one, so two processes never
  both take one epoch; :meth:`LeaseBook.renew` extends it only for the same holder and
  epoch.
- The leader's every write transaction checks the epoch first (:meth:`LeaseBook.fence`,
  installed as the store's ``fence``): once a standby has taken over, a write of the old
  leader fails with :class:`Fenced` instead of committing. On PostgreSQL the check reads
  the row ``FOR SHARE``: a takeover waits for a write in flight, and a write after it sees
  the new epoch.
- :class:`Keeper` renews every third of the lease; a renewal refused, or none confirmed
  before the lease would run out on this machine's clock, is the end of this leader
  (``on_lost``: the service ends its process at once, and comes back as a standby). A
  standby takes over only once the lease has expired on its own clock: clocks of the pair
  are assumed within ``margin_s`` of each other (NTP).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from hetsched.controlplane.storage.store import Store
from hetsched.controlplane.storage.tables import leases

__all__ = ["Fenced", "Held", "Keeper", "LeaseBook"]

log = logging.getLogger("hetsched.leadership")


class Fenced(Exception):
    """This process no longer holds its lease: another leads under a later epoch."""


@dataclass(frozen=True)
class Held:
    """A lease as the store has it."""

    name: str
    holder: str
    epoch: int
    url: str
    expires_at: float


class LeaseBook:
    """The lease ``name`` in ``store``, as seen by ``holder`` (this process), whose API is
    at ``url``."""

    def __init__(self, store: Store, name: str, holder: str, url: str, lease_s: float) -> None:
        self.store = store
        self.name = name
        self.holder = holder
        self.url = url
        self.lease_s = lease_s
        #: the epoch this process leads under (None: it does not lead)
        self.epoch: int | None = None

    def current(self) -> Held | None:
        with self.store.read() as conn:
            row = conn.execute(select(leases).where(leases.c.name == self.name)).first()
        return None if row is None else _held(row._mapping)

    def take(self, now: float | None = None) -> Held | None:
        """Take the lease if it is missing or expired (the epoch raised by one); None when
        another holds it, or took it first."""
        now = time.time() if now is None else now
        values = {
            "holder": self.holder,
            "url": self.url,
            "renewed_at": now,
            "expires_at": now + self.lease_s,
        }
        seen = self.current()
        try:
            with self.store.write() as conn:
                if seen is None:
                    conn.execute(insert(leases).values(name=self.name, epoch=1, **values))
                    epoch = 1
                elif seen.expires_at > now:
                    return None
                else:
                    result = conn.execute(
                        update(leases)
                        .where(leases.c.name == self.name, leases.c.epoch == seen.epoch)
                        .values(epoch=seen.epoch + 1, **values)
                    )
                    if result.rowcount != 1:
                        return None
                    epoch = seen.epoch + 1
        except IntegrityError:  # another inserted the first row first
            return None
        self.epoch = epoch
        return Held(self.name, self.holder, epoch, self.url, now + self.lease_s)

    def renew(self, now: float | None = None) -> bool:
        """Extend the lease this process holds; False when it no longer holds it."""
        if self.epoch is None:
            return False
        now = time.time() if now is None else now
        with self.store.write() as conn:
            result = conn.execute(
                update(leases)
                .where(
                    leases.c.name == self.name,
                    leases.c.holder == self.holder,
                    leases.c.epoch == self.epoch,
                )
                .values(renewed_at=now, expires_at=now + self.lease_s)
            )
        return result.rowcount == 1

    def release(self, now: float | None = None) -> None:
        """Hand the lease on: it expires now (a standby takes it at its next try)."""
        if self.epoch is None:
            return
        now = time.time() if now is None else now
        with self.store.write() as conn:
            conn.execute(
                update(leases)
                .where(
                    leases.c.name == self.name,
                    leases.c.holder == self.holder,
                    leases.c.epoch == self.epoch,
                )
                .values(expires_at=now)
            )
        self.epoch = None

    def fence(self, conn: Connection) -> None:
        """In a write transaction of the leader: raise :class:`Fenced` unless the lease is
        still this process's, under its epoch."""
        query = select(leases.c.holder, leases.c.epoch).where(leases.c.name == self.name)
        if not self.store.sqlite:
            query = query.with_for_update(read=True)
        row = conn.execute(query).first()
        if row is None or row.holder != self.holder or row.epoch != self.epoch:
            found = "none" if row is None else f"{row.holder} at epoch {row.epoch}"
            raise Fenced(f"lease {self.name}: held by {found}, not by us at epoch {self.epoch}")


def _held(row: Mapping[Any, Any]) -> Held:
    return Held(
        str(row["name"]),
        str(row["holder"]),
        int(row["epoch"]),
        str(row["url"]),
        float(row["expires_at"]),
    )


class Keeper:
    """Renews the lease every third of it from a thread; ``on_lost`` when it cannot."""

    def __init__(self, book: LeaseBook, on_lost: Callable[[str], None]) -> None:
        self.book = book
        self.on_lost = on_lost
        self.every_s = book.lease_s / 3
        self._stop = threading.Event()
        #: until when (this machine's clock) the lease is surely still ours
        self.valid_until = time.time() + book.lease_s
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            began = time.time()
            try:
                kept = self.book.renew(began)
            except Fenced:
                kept = False
            except Exception as exc:  # the store is unreachable: try again until too late
                log.warning("lease %s: renewal failed: %s", self.book.name, exc)
                kept = None
            if kept:
                self.valid_until = began + self.book.lease_s
            elif kept is False:
                self.on_lost(f"lease {self.book.name}: another process took it over")
                return
            elif time.time() >= self.valid_until - self.every_s:
                self.on_lost(f"lease {self.book.name}: not renewed in time")
                return
