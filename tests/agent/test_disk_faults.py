"""What the process executor does when the node's disk fails: a task that cannot start for
lack of disk waits (not started: the node's fault, not the job's), exits the store has not
taken are journaled off the home and read back after a restart, and a log follower whose
log was cut starts again from the cut log's start."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from hetsched.agent import executor as executor_module
from hetsched.agent import wrapper
from hetsched.agent.executor import Executor
from hetsched.cluster.placement import Placement
from hetsched.controlplane.api.tasklogs import LocalLogs
from hetsched.drivers.executor import Exit, Launch, Start
from hetsched.keys import TaskKey


def _start(executor: Executor, failure: OSError, monkeypatch: pytest.MonkeyPatch) -> Exit:
    def refuse(_path: Path) -> int:
        raise failure

    monkeypatch.setattr(executor_module, "open_task_log", refuse)
    key = TaskKey("j1", 0, 1)
    start = Start(key, Placement("n1", 100, 64), launch=Launch(("true",), {}))
    executor.start([start], 0.0)
    (exit_,) = executor.poll()
    return exit_


def test_a_start_refused_by_a_full_disk_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = OSError(errno.ENOSPC, "No space left on device")
    exit_ = _start(Executor(tmp_path, "i1"), full, monkeypatch)
    assert exit_.not_started and not exit_.succeeded
    assert (
        exit_.reason
        == "cannot start: [Errno 28] No space left on device; the node's disk: it waits"
    )


def test_a_start_refused_for_another_reason_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    denied = OSError(errno.EACCES, "Permission denied")
    exit_ = _start(Executor(tmp_path, "i1"), denied, monkeypatch)
    assert not exit_.not_started
    assert exit_.reason == "cannot start: [Errno 13] Permission denied"


def test_journaled_exits_are_read_back_where_the_exit_file_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wrapper, "EXIT_JOURNAL", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    executor = Executor(tmp_path / "home", "inst")
    executor.keep_exits(
        [
            Exit.of("j1", 0, 1, 0, False, "exit code 0"),
            Exit.of("j1", 1, 1, 3, False, "exit code 3"),
            Exit.of("j2", 0, 2, None, False, "lost"),  # no status: nothing to keep
        ]
    )
    assert executor.recorded_exit("j1", 0, 1) == 0
    assert executor.recorded_exit("j1", 1, 1) == 3
    assert executor.recorded_exit("j2", 0, 2) is None
    # the exit file, where the wrapper wrote one, comes first
    executor.job_dir("j1").mkdir(parents=True)
    executor.exit_file("j1", 1, 1).write_text("7\n")
    assert executor.recorded_exit("j1", 1, 1) == 7
    # another instance's journal is not this one's
    assert Executor(tmp_path / "home", "other").recorded_exit("j1", 0, 1) is None
    shutil.rmtree(tmp_path / "shm")


def test_a_follower_past_a_cut_log_reads_it_from_its_start(tmp_path: Path) -> None:
    executor = Executor(tmp_path, "i1")
    log = executor.log_path("j1", 0, "stdout")
    log.parent.mkdir(parents=True)
    log.write_bytes(b"x" * 100)
    logs = LocalLogs(executor)
    assert logs.read("j1", 0, "stdout", 0, 1000) == (b"x" * 100, 100)
    assert logs.read("j1", 0, "stdout", 100, 1000) == (b"", 100)
    log.write_bytes(b"x" * 90)  # shorter, not cut: past its end reads nothing
    assert logs.read("j1", 0, "stdout", 100, 1000) == (b"", 100)
    cut = b"--- hetsched: 100 bytes of earlier output dropped (under 64 bytes) ---\nyy"
    log.write_bytes(cut)  # cut under its cap: from its new start
    assert logs.read("j1", 0, "stdout", 100, 1000) == (cut, len(cut))
