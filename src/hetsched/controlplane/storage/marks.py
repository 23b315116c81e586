"""The store's own marks (``store_marks``): the probe write that tells whether the store
can be written again after an outage, and marks such as when the schema was created. Part
of :class:`~hetsched.controlplane.storage.store.Store`."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from importlib import resources

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, select, text, update

from hetsched.controlplane.storage.tables import store_marks, tokens

__all__ = ["StoreMarks", "migration_config"]


def migration_config() -> Config:
    """Alembic's configuration of the store's migrations."""
    config = Config()
    location = resources.files("hetsched.controlplane.storage") / "migrations"
    config.set_main_option("script_location", str(location))
    return config


class StoreMarks:
    """The marks' reads and writes (a part of Store, which provides ``write``)."""

    def write(self, durable: bool = True) -> AbstractContextManager[Connection]:
        raise NotImplementedError  # provided by Store

    def read(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError  # provided by Store

    engine: Engine

    # -- what the check at start reads (controlplane/storage/integrity.py) -----------------

    def schema_revision(self) -> str | None:
        """The schema version the store is at (None: no hetsched schema)."""
        with self.read() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
        return None if row is None else str(row[0])

    @staticmethod
    def known_revisions() -> set[str]:
        """Every schema version this hetsched's migrations know."""
        script = ScriptDirectory.from_config(migration_config())
        return {s.revision for s in script.walk_revisions()}

    def has_tokens(self) -> bool:
        """Whether any token (revoked or not) was ever stored."""
        with self.read() as conn:
            return conn.execute(select(tokens.c.id).limit(1)).first() is not None

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
