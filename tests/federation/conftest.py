"""Fixtures of the federation tests live in fed_fixtures.py."""
