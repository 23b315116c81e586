"""Stopping a long-running command on SIGTERM or SIGINT.

Two ways a Python-level handler fails to stop a process that waits in its main thread:

- A signal lands on whichever thread the kernel picks. When that is one of gRPC's threads,
  CPython's C handler only notes it; the Python handler runs once the main thread next
  executes bytecode, and a main thread asleep in ``threading.Event.wait`` (no timeout)
  never wakes to do so: the driver runs on after SIGTERM (seen now and then under load).
- A Python handler that calls ``Event.set`` may wait for the event's lock that its own
  thread holds at that moment.

So the wake-up does not depend on the Python handler at all: the C handler itself writes
to :func:`signal.set_wakeup_fd`'s pipe, from any thread, and a small thread that reads the
pipe sets the event. The Python handler is installed only to replace the default action
(ending the process at once) and does nothing.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

__all__ = ["stop_on_signals"]


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """The wake-up pipe carries the signal; nothing is left to do here."""


def stop_on_signals(*signals: signal.Signals) -> threading.Event:
    """An event set once SIGTERM or SIGINT (or ``signals``) arrives; call it from the main
    thread (only the main thread may install signal handlers and the wake-up pipe)."""
    stop = threading.Event()
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    wanted = {int(sig) for sig in signals or (signal.SIGTERM, signal.SIGINT)}

    def _wait() -> None:
        # the pipe carries each caught signal's number; other handlers' signals are not ours
        while not wanted.intersection(os.read(read_end, 64)):
            continue
        stop.set()

    threading.Thread(target=_wait, name="signals", daemon=True).start()
    for sig in wanted:
        signal.signal(sig, _ignore)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    return stop
