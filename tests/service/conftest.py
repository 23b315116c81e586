"""Fixtures for the service tests; the helpers live in service_fixtures.py."""

from pg_fixture import postgres_url
from service_fixtures import api

__all__ = ["api", "postgres_url"]
