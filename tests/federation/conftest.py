"""Fixtures of the federation tests live in fed_fixtures.py; PostgreSQL comes from the
service's fixtures (a throwaway server, or HETSCHED_TEST_POSTGRES_URL)."""

from service.service_fixtures import postgres_url

__all__ = ["postgres_url"]
