"""Fixtures of the federation tests live in fed_fixtures.py; PostgreSQL comes from the
shared fixture in pg_fixture.py (a throwaway server, or HETSCHED_TEST_POSTGRES_URL)."""

from pg_fixture import postgres_url

__all__ = ["postgres_url"]
