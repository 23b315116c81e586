"""Fixtures for the control plane's tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from hetsched.controlplane.storage.store import Store
from pg_fixture import postgres_url

__all__ = ["postgres_url", "store"]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated store on a SQLite file, and on a PostgreSQL server (skipped without one)."""
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
