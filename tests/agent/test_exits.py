"""The exit watcher: a process that ends wakes the driver at once, child or not; no
polling. Where pidfds are not available it says so and the driver polls."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hetsched.agent import exits
from hetsched.agent.executor import Executor
from hetsched.agent.exits import ExitWatcher
from hetsched.cluster.placement import Placement
from hetsched.drivers import Exit, Launch, Start, Stop
from hetsched.keys import TaskKey

pytestmark = pytest.mark.skipif(
    not exits.pidfds_supported(),
    reason="pidfd_open is not available on this kernel",
)


def _ended(event: threading.Event) -> bool:
    # generous: the call comes as soon as the process ends; a loaded machine may be slow
    return event.wait(timeout=30)


def test_a_child_that_ends_is_reported_once() -> None:
    ended = threading.Event()
    calls: list[int] = []
    watcher = ExitWatcher(lambda: (calls.append(1), ended.set()))
    with subprocess.Popen(["sh", "-c", "read x"], stdin=subprocess.PIPE) as proc:
        try:
            assert watcher.watch(proc.pid) and watcher.watch(proc.pid)
            assert watcher.watched() == 1
            assert not ended.is_set()
            assert proc.stdin is not None
            proc.stdin.close()  # the shell's read sees end of file and it exits
            assert _ended(ended)
            proc.wait(timeout=10)
            assert calls == [1] and watcher.watched() == 0
        finally:
            watcher.close()
            watcher.close()


def test_a_process_that_is_not_our_child_is_reported() -> None:
    """An adopted task (started by an earlier incarnation) is nobody's child here."""
    ended = threading.Event()
    watcher = ExitWatcher(ended.set)
    # the shell starts a grandchild and prints its pid; once the shell has exited, the
    # grandchild is not ours
    with subprocess.Popen(["sh", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE) as parent:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        parent.wait(timeout=10)
    try:
        assert watcher.watch(grandchild)
        assert not ended.is_set()
        os.kill(grandchild, signal.SIGKILL)
        assert _ended(ended)
    finally:
        watcher.close()


def test_a_process_already_gone_is_not_watched() -> None:
    watcher = ExitWatcher(lambda: None)
    proc = subprocess.Popen(["true"])
    proc.wait()
    try:
        assert not watcher.watch(proc.pid)
    finally:
        watcher.close()


def test_without_pidfds_the_executor_asks_to_be_polled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "pidfd_open")
    executor = Executor(tmp_path, f"test-{os.getpid()}-{time.monotonic_ns()}")
    executor.on_exit = lambda: None
    assert not executor.exits_reported
    assert not ExitWatcher(lambda: None).watch(os.getpid())


def test_the_executor_wakes_its_driver_and_names_its_next_due(tmp_path: Path) -> None:
    ended = threading.Event()
    executor = Executor(tmp_path, f"test-{os.getpid()}-{time.monotonic_ns()}", kill_grace_s=30)
    executor.on_exit = ended.set
    assert executor.exits_reported and executor.next_due() is None
    launch = Launch(("sleep", "30"), {}, max_runtime_s=100)
    executor.start([Start(TaskKey("j", 0, 1), Placement("n", 1, 1), launch=launch)], 0.0)
    handle = executor.handles["j/0#1"]
    try:
        assert handle.deadline is not None and executor.next_due() == handle.deadline
        executor.stop([Stop(TaskKey("j", 0, 1), Placement("n", 1, 1), 0.0, 5.0, "test")], 1000.0)
        assert executor.next_due() == 1005.0  # its SIGKILL; the runtime no longer matters
        executor.kill_pid(handle.pid)
        assert _ended(ended)
        (done,) = _poll_until_exit(executor)
        assert done.stopped
    finally:
        executor.shutdown()


def _poll_until_exit(executor: Executor) -> list[Exit]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = executor.poll()
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError("no exit")
