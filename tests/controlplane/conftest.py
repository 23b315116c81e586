"""Fixtures for the control plane's tests."""

from pg_fixture import postgres_url

__all__ = ["postgres_url"]
