"""Shared fixtures. Builders live in ``builders.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from builders import EXAMPLES, TRACES
from leaks import kill_leftovers, wait_for_none

__all__ = ["EXAMPLES", "TRACES"]


def pytest_configure(config: pytest.Config) -> None:
    # the CEL library raises the recursion limit when its parser is first built, and
    # hypothesis fails the test in which that happens: build it before any test runs
    from hetsched.model.selector import warm

    warm()


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


@pytest.fixture
def traces() -> Path:
    """The shared trace folder; tests that need it skip when it is absent."""
    if not TRACES.is_dir():
        pytest.skip(f"trace folder {TRACES} is absent")
    return TRACES


@pytest.fixture(scope="session", autouse=True)
def no_task_outlives_the_tests(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fails the run if a task process started by a test's service or executor is still
    alive when the session ends (and kills it, so nothing outlives the run)."""
    yield
    base = tmp_path_factory.getbasetemp()
    leftovers = wait_for_none(base, timeout_s=5.0)
    if leftovers:
        kill_leftovers(leftovers)
        lines = [f"  pid {p.pid} ({p.command}) under {p.where}" for p in leftovers]
        pytest.fail(
            "task processes outlived the tests that started them:\n" + "\n".join(lines),
            pytrace=False,
        )
