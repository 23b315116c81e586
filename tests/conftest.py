"""Shared fixtures. Builders live in ``builders.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import EXAMPLES, TRACES

__all__ = ["EXAMPLES", "TRACES"]


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


@pytest.fixture
def traces() -> Path:
    """The shared trace folder; tests that need it skip when it is absent."""
    if not TRACES.is_dir():
        pytest.skip(f"trace folder {TRACES} is absent")
    return TRACES
