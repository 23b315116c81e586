"""The store's own marks (``store_marks``): the probe write that tells whether the store
can be written again after an outage, and marks such as when the schema was created. Part
of :class:`~hetsched.controlplane.storage.store.Store`."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager

from sqlalchemy import Connection, select, update

from hetsched.controlplane.storage.tables import store_marks

__all__ = ["StoreMarks"]


class StoreMarks:
    """The marks' reads and writes (a part of Store, which provides ``write``)."""

    def write(self, durable: bool = True) -> AbstractContextManager[Connection]:
        raise NotImplementedError  # provided by Store

    def read(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError  # provided by Store

    def probe(self) -> None:
        """One small durable write (the ``probe`` mark's time); raises what the store
        raises while it cannot be written."""
        self.mark("probe", "", time.time())

    def ping(self) -> None:
        """One small read; raises what the store raises while it cannot be read."""
        with self.read() as conn:
            conn.execute(select(store_marks.c.name).limit(1)).all()

    def mark(self, name: str, value: str, at: float | None = None) -> None:
        """Set mark ``name`` to ``value`` (committed when this returns)."""
        at = time.time() if at is None else at
        with self.write() as conn:
            changed = conn.execute(
                update(store_marks).where(store_marks.c.name == name).values(value=value, at=at)
            )
            if changed.rowcount == 0:
                conn.execute(store_marks.insert().values(name=name, value=value, at=at))

    def marks(self) -> dict[str, str]:
        """Every mark's value, by name."""
        with self.read() as conn:
            rows = conn.execute(select(store_marks.c.name, store_marks.c.value)).all()
        return {name: value for name, value in rows}
