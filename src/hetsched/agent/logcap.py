"""Task logs kept under a size cap (``hetsched up --max-log-size``).

A task's stdout and stderr go straight into files in the home (no process in between: the
task writes with ``O_APPEND``), so a chatty task could fill the disk the store lives on.
Every ``interval_s`` while tasks run, each running task's log that has grown past the cap
is cut in place: its newest half is kept, from a line's start, after one line that says
how much earlier output was dropped. The task's next writes land after it (``O_APPEND``);
output written in the instant between reading the tail and cutting the file is lost.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["CUT", "LogCap", "cap_log", "was_cut"]

#: what the first line of a cut log says, after its ``--- hetsched: N``
CUT = b" bytes of earlier output dropped "
#: how often running tasks' logs are looked at (seconds)
_INTERVAL_S = 2.0


def cap_log(path: Path, max_bytes: int) -> int:
    """Cut the log at ``path`` to at most ``max_bytes`` (its newest half kept, after a line
    saying so) if it is longer; returns the bytes dropped (0 when it was not cut)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        size = os.fstat(fd).st_size
        if size <= max_bytes:
            return 0
        keep = max_bytes // 2
        tail = os.pread(fd, keep, size - keep)
        newline = tail.find(b"\n")
        if 0 <= newline < len(tail) - 1:
            tail = tail[newline + 1 :]
        dropped = size - len(tail)
        note = (
            f"--- hetsched: {dropped}{CUT.decode()}(this log is kept under {max_bytes} bytes) ---\n"
        ).encode()
        os.ftruncate(fd, 0)
        os.write(fd, note + tail)
        return dropped
    finally:
        os.close(fd)


def was_cut(fd: int) -> bool:
    """Whether the log open as ``fd`` was cut under its cap (its first line says so)."""
    first = os.pread(fd, 120, 0).split(b"\n", 1)[0]
    return first.startswith(b"--- hetsched: ") and CUT in first


class LogCap:
    """When running tasks' logs are next looked at, and the looking (``max_bytes`` None:
    never)."""

    def __init__(self, max_bytes: int | None, interval_s: float = _INTERVAL_S) -> None:
        self.max_bytes = max_bytes
        self.interval_s = interval_s
        self._next = 0.0
        #: bytes dropped from logs so far
        self.dropped = 0

    def due(self, running: bool) -> float | None:
        return self._next if self.max_bytes is not None and running else None

    def check(self, logs: Iterable[Path], now: float) -> None:
        """Cut the ``logs`` past the cap, once ``interval_s`` has passed since the last."""
        if self.max_bytes is None or now < self._next:
            return
        self._next = now + self.interval_s
        for path in logs:
            with contextlib.suppress(OSError):
                self.dropped += cap_log(path, self.max_bytes)
