"""Helpers for the Ray tests: every cluster runs in its own network and PID namespaces."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsched.ray.testing import BodyResult, namespace_unavailable

__all__ = ["HERE", "check", "require_namespaces"]

#: bodies are imported from here inside the namespace
HERE = str(Path(__file__).parent)


def require_namespaces() -> None:
    reason = namespace_unavailable()
    if reason is not None:
        pytest.skip(reason)


def check(result: BodyResult) -> object:
    """The body's value; fails the test with the body's output when it failed."""
    assert result.rc == 0, f"body failed (rc {result.rc}):\n{result.output}"
    return result.value
