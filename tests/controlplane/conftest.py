"""Fixtures for the control plane's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hetsched.controlplane.storage.store import Store
from pg_fixture import new_database, postgres_url

__all__ = ["postgres_url", "store"]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated store on a SQLite file, and on a PostgreSQL server (skipped without one)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'test.db'}"
    else:
        url = new_database(request.getfixturevalue("postgres_url"))
    store = Store(url)
    store.migrate()
    try:
        yield store
    finally:
        store.close()
