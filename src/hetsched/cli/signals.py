"""Stopping a long-running command on SIGTERM or SIGINT.

A signal handler runs in the main thread between two bytecodes, wherever that thread is,
even inside ``threading.Event.wait``, which holds the event's lock for a moment before it
sleeps. A handler that calls ``Event.set`` there waits for a lock its own thread holds, and
the process never stops (a driver left running after SIGTERM, now and then, under load).
So the handler here takes no lock: it writes one byte to a pipe, and a small thread that
reads the pipe sets the event.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from types import FrameType

__all__ = ["stop_on_signals"]


def stop_on_signals(*signals: signal.Signals) -> threading.Event:
    """An event set once SIGTERM or SIGINT (or ``signals``) arrives; call it from the main
    thread (only the main thread may install signal handlers)."""
    stop = threading.Event()
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def _on_signal(_signum: int, _frame: FrameType | None) -> None:
        # a full pipe already carries a wake-up
        with contextlib.suppress(BlockingIOError):
            os.write(write_end, b"\0")

    def _wait() -> None:
        os.read(read_end, 1)
        stop.set()

    threading.Thread(target=_wait, name="signals", daemon=True).start()
    for sig in signals or (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    return stop
