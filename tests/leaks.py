"""Task processes that outlive the test that started them.

Every task the executor starts carries ``HETSCHED_INSTANCE`` in its environment, runs in
its job directory under the service's home (or has its exit file and logs there as fds
0-2), and a test's home is under pytest's base temporary directory. A process with that
variable whose instance is one of those homes', or whose working directory or standard
streams lie under the base directory, was started by a test of this session.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = ["Leftover", "find_leftovers", "kill_leftovers", "wait_for_none"]


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str
    #: where it points under the base directory (its job directory, a log), naming the test
    where: str


def _instances(base: Path) -> set[str]:
    found: set[str] = set()
    for path in base.rglob("instance"):
        try:
            found.add(path.read_text().strip())
        except OSError:
            continue
    return found


def _under(path: str, base: str) -> bool:
    return path == base or path.startswith(base + os.sep)


def _place(proc: psutil.Process, base: str) -> str | None:
    candidates: list[str] = []
    with contextlib.suppress(psutil.Error, OSError):
        candidates.append(proc.cwd())
    for fd in (0, 1, 2):
        try:
            candidates.append(os.readlink(f"/proc/{proc.pid}/fd/{fd}"))
        except OSError:
            continue
    return next((c for c in candidates if _under(c, base)), None)


def find_leftovers(base: Path) -> list[Leftover]:
    """Live (not zombie) task processes started under ``base``."""
    root = os.path.realpath(base)
    instances = _instances(base)
    out: list[Leftover] = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            instance = proc.environ().get("HETSCHED_INSTANCE")
            if instance is None:
                continue
            place = _place(proc, root)
            if place is None and instance not in instances:
                continue
            command = " ".join(proc.cmdline())[:200]
        except (psutil.Error, OSError):
            continue
        out.append(Leftover(proc.pid, command, place or f"instance {instance}"))
    return out


def kill_leftovers(leftovers: list[Leftover]) -> None:
    for item in leftovers:
        try:
            os.killpg(item.pid, signal.SIGKILL)
        except OSError:
            try:
                os.kill(item.pid, signal.SIGKILL)
            except OSError:
                continue


def wait_for_none(base: Path, timeout_s: float) -> list[Leftover]:
    """The leftovers still there after up to ``timeout_s`` (tasks being killed end late)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = find_leftovers(base)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)
