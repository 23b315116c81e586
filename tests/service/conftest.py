"""Fixtures for the service tests; the helpers live in service_fixtures.py."""

from service_fixtures import api

from pg_fixture import postgres_url

__all__ = ["api", "postgres_url"]
