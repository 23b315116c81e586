"""Waiting in tests for what another process does: a condition polled until it holds, and
the lines a task's log has so far."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["eventually", "log_lines", "until"]

T = TypeVar("T")


def eventually(check: Callable[[], T], timeout: float = 60) -> T:
    """``check()`` once it is truthy, polled every 50 ms; an assertion after ``timeout``
    seconds."""
    return until("the condition", check, timeout)


def until(what: str, check: Callable[[], T], timeout_s: float = 60.0) -> T:
    """``check()`` once it is truthy, polled every 50 ms; after ``timeout_s`` seconds an
    assertion that names ``what`` was waited for."""
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return found


def log_lines(path: Path) -> list[list[str]]:
    """The whitespace-split lines of a task's log (none before it is written)."""
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []
