"""Knowing at once that a task's process ended, without polling.

An :class:`ExitWatcher` holds a pidfd (``pidfd_open``, Linux 5.3 and later) per watched
process, children and adopted processes alike, and one thread blocked in ``poll()`` on
them. When a process ends its pidfd becomes readable: the watcher forgets it and calls
``on_exit`` (the reconcile loop's wake-up), which then reaps and reports the exit through
the executor as usual. The watcher never reaps or signals anything.

Where pidfds are not available (another OS, an old kernel, a sandbox that refuses the call)
:attr:`ExitWatcher.supported` is False and the loop falls back to polling the executor.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Callable

__all__ = ["ExitWatcher", "pidfds_supported"]

log = logging.getLogger(__name__)


def pidfds_supported() -> bool:
    """Whether this process may open pidfds (and poll them)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None or not hasattr(select, "poll"):
        return False
    try:
        os.close(opener(os.getpid()))
    except OSError:
        return False
    return True


class ExitWatcher:
    """Calls ``on_exit`` from its own thread whenever a watched process ends."""

    def __init__(self, on_exit: Callable[[], None]) -> None:
        self.on_exit = on_exit
        self.supported = pidfds_supported()
        self._lock = threading.Lock()
        #: pidfd -> pid, and pid -> pidfd
        self._pids: dict[int, int] = {}
        self._fds: dict[int, int] = {}
        self._poll = select.poll() if self.supported else None
        self._read_end, self._write_end = os.pipe() if self.supported else (-1, -1)
        if self._poll is not None:
            self._poll.register(self._read_end, select.POLLIN)
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, pid: int) -> bool:
        """Watch ``pid`` (once); False if it cannot be watched (it already ended, or pidfds
        are not supported). A process that ended before the call is not reported: the
        caller's next poll finds it."""
        if not self.supported or self._closed:
            return False
        with self._lock:
            if pid in self._fds:
                return True
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                return False
            self._fds[pid] = fd
            self._pids[fd] = pid
            assert self._poll is not None
            self._poll.register(fd, select.POLLIN)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="hetsched-exits", daemon=True
                )
                self._thread.start()
        self._nudge()
        return True

    def watched(self) -> int:
        with self._lock:
            return len(self._fds)

    def close(self) -> None:
        """Stop the thread and close every pidfd (idempotent)."""
        with self._lock:
            if self._closed or not self.supported:
                self._closed = True
                return
            self._closed = True
            thread = self._thread
        self._nudge()
        if thread is not None:
            thread.join(timeout=5)
        with self._lock:
            for fd in self._pids:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pids.clear()
            self._fds.clear()
            for fd in (self._read_end, self._write_end):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _nudge(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._write_end, b"\0")

    def _run(self) -> None:
        assert self._poll is not None
        while not self._closed:
            try:
                ready = self._poll.poll()
            except InterruptedError:
                continue
            ended = False
            for fd, _mask in ready:
                if fd == self._read_end:
                    with contextlib.suppress(OSError):
                        os.read(self._read_end, 4096)
                    continue
                ended = self._forget(fd) or ended
            if ended:
                try:
                    self.on_exit()
                except Exception:  # the loop's wake-up must not kill this thread
                    log.exception("exit watcher: waking the loop failed")

    def _forget(self, fd: int) -> bool:
        with self._lock:
            pid = self._pids.pop(fd, None)
            if pid is None:
                return False
            self._fds.pop(pid, None)
            assert self._poll is not None
            with contextlib.suppress(KeyError, ValueError):
                self._poll.unregister(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        return True
