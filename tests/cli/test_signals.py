"""SIGTERM and SIGINT stop a long-running command even when the signal lands while the main
thread holds the stop event's own lock (where a handler calling ``Event.set`` waits forever
for a lock its own thread holds)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# The main thread takes the event's lock (as Event.wait does for a moment before it sleeps),
# the signal arrives and its handler runs right there; then the lock is let go.
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from hetsched.cli.signals import stop_on_signals

    stop = stop_on_signals()
    with stop._cond:
        os.kill(os.getpid(), signal.{name})
        for _ in range(1000):  # bytecodes: the handler runs here, the lock held
            pass
    sys.exit(0 if stop.wait(20) else 3)
    """
)


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_landing_inside_the_events_lock_still_stops(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(name=name)], timeout=60, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()


def test_the_event_is_not_set_without_a_signal() -> None:
    script = (
        "from hetsched.cli.signals import stop_on_signals\n"
        "import sys; sys.exit(3 if stop_on_signals().wait(0.5) else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()


# The signal lands on another thread (as it may on one of gRPC's) while the main thread sleeps
# in the wait: CPython runs a Python handler only in the main thread, once it wakes.
ELSEWHERE = textwrap.dedent(
    """
    import signal, sys, threading, time
    from hetsched.cli.signals import stop_on_signals

    stop = stop_on_signals()
    sleeper = threading.Thread(target=time.sleep, args=(60,), daemon=True)
    sleeper.start()

    def send():
        time.sleep(0.5)
        signal.pthread_kill(sleeper.ident, signal.{name})

    threading.Thread(target=send, daemon=True).start()
    sys.exit(0 if stop.wait(20) else 3)
    """
)


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_landing_on_another_thread_wakes_the_sleeping_main_thread(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ELSEWHERE.format(name=name)], timeout=60, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()


def test_another_signal_on_the_wake_up_pipe_does_not_stop() -> None:
    script = textwrap.dedent(
        """
        import os, signal, sys
        from hetsched.cli.signals import stop_on_signals

        stop = stop_on_signals()
        signal.signal(signal.SIGUSR1, lambda *_: None)
        os.kill(os.getpid(), signal.SIGUSR1)
        sys.exit(3 if stop.wait(1) else 0)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
