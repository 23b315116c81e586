"""The task runner and its supervisor on this machine, without Ray: exit codes as sh reports
them, output handed out in order with the exit last, signals to the whole group, and a task
that dies with its runner."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.ray.runner import TaskRunner


def _runner(tmp_path: Path, command: list[str], **spec: Any) -> TaskRunner:
    return TaskRunner(
        {
            "key": "job1/0#1",
            "job_id": "job1",
            "task": 0,
            "run": 1,
            "node": "n",
            "command": command,
            "env": spec.pop("env", {}),
            "workdir": spec.pop("workdir", None),
            "node_dir": str(tmp_path / "node"),
            "run_as": None,
        }
    )


def _family(group: int, at_least: int, timeout_s: float = 30) -> list[psutil.Process]:
    """The processes of group ``group`` once there are ``at_least`` of them (the task's
    shell has started its children): waited for, never assumed after a fixed pause."""
    deadline = time.monotonic() + timeout_s
    while len(family := [p for p in psutil.process_iter() if _pgid(p.pid) == group]) < at_least:
        assert time.monotonic() < deadline, f"group {group}: {len(family)} processes"
        time.sleep(0.02)
    return family


def _drain(
    runner: TaskRunner, limit: int = 1 << 20, timeout_s: float = 30
) -> tuple[bytes, bytes, int | None, int]:
    """Follow the runner as the executor does: (stdout, stderr, exit, answers)."""
    out, err = b"", b""
    deadline = time.monotonic() + timeout_s
    answers = 0
    while time.monotonic() < deadline:
        reply = runner.sync(len(out), len(err), 0.5, limit)
        answers += 1
        out += reply["out"]
        err += reply["err"]
        if reply["ended"]:
            return out, err, reply["exit"], answers
    raise AssertionError("the task did not end")


@pytest.mark.parametrize(
    ("command", "code", "err"),
    [
        (["sh", "-c", "echo out; echo err >&2; exit 4"], 4, b"err\n"),
        (["true"], 0, b""),
        (["/no/such/program"], 127, b"hetsched-task: /no/such/program: not found\n"),
        (["/dev/null"], 126, b"hetsched-task: /dev/null: Permission denied\n"),
        (["sh", "-c", "kill -TERM $$"], 143, b""),
        (["sh", "-c", "kill -KILL $$"], 137, b""),
    ],
)
def test_exit_codes_as_sh_reports_them(
    tmp_path: Path, command: list[str], code: int, err: bytes
) -> None:
    runner = _runner(tmp_path, command)
    _out, got_err, exit_code, _ = _drain(runner)
    assert (exit_code, got_err) == (code, err)
    runner.retire()


def test_output_comes_in_order_and_the_exit_only_after_all_of_it(tmp_path: Path) -> None:
    script = "import sys\nfor i in range(2000): print(f'line {i}')\nsys.exit(3)"
    runner = _runner(tmp_path, [sys.executable, "-c", script])
    out, _err, code, answers = _drain(runner, limit=1000)
    assert code == 3
    assert out.decode().splitlines() == [f"line {i}" for i in range(2000)]
    # 1000 bytes at most per answer: the exit waited for the rest
    assert answers > len(out) // 1000


@settings(max_examples=8, deadline=None)
@given(limit=st.integers(1, 3000), lines=st.integers(0, 300))
def test_following_the_offsets_gives_exactly_the_output_then_the_exit(
    tmp_path_factory: pytest.TempPathFactory, limit: int, lines: int
) -> None:
    tmp_path = tmp_path_factory.mktemp("runner")
    script = f"import sys\nfor i in range({lines}): print(i); print(-i, file=sys.stderr)"
    runner = _runner(tmp_path, [sys.executable, "-c", script])
    out, err, code, _ = _drain(runner, limit=limit)
    assert code == 0
    assert out.decode().split() == [str(i) for i in range(lines)]
    assert err.decode().split() == [str(-i) for i in range(lines)]
    runner.retire()


def test_an_empty_command_is_a_start_error(tmp_path: Path) -> None:
    runner = _runner(tmp_path, [])
    assert runner.status()["error"] == "cannot start: the task supervisor exited with 2"


def test_the_task_has_its_own_group_env_and_directory(tmp_path: Path) -> None:
    show = "import os; print(os.getpgid(0) == os.getsid(0) == os.getppid(), os.environ['MINE'])"
    runner = _runner(tmp_path, [sys.executable, "-c", show], env={"MINE": "x"})
    out, _err, code, _ = _drain(runner)
    assert (code, out) == (0, b"True x\n")
    assert runner.status()["pid"] > 0 and runner.status()["ended"]


def test_a_bad_working_directory_is_reported_not_raised(tmp_path: Path) -> None:
    runner = _runner(tmp_path, ["true"], workdir=str(tmp_path / "missing"))
    reply = runner.sync(0, 0, 0.1, 100)
    assert reply["error"].startswith("cannot start: ") and reply["ended"]


def test_signals_reach_the_group_and_the_supervisor_waits_for_the_status(
    tmp_path: Path,
) -> None:
    graceful = _runner(tmp_path, ["sh", "-c", "trap 'echo bye; exit 0' TERM; sleep 30 & wait"])
    # its sleep runs: the shell has set its trap (a fixed pause may end before, when busy)
    _family(graceful.pid, 2)
    assert graceful.signal(signal.SIGTERM)
    out, _err, code, _ = _drain(graceful)
    assert (code, out) == (0, b"bye\n")
    assert not graceful.signal(signal.SIGTERM)  # it has ended
    stubborn = _runner(tmp_path, ["sh", "-c", "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60"])
    family = _family(stubborn.pid, 3)
    stubborn.signal(signal.SIGTERM)
    time.sleep(0.3)
    assert stubborn.signal(signal.SIGKILL)
    assert _drain(stubborn)[2] == -9
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert alive == []


def test_the_task_dies_with_its_runner(tmp_path: Path) -> None:
    runner = _runner(tmp_path, ["sh", "-c", "sleep 60 & sleep 60"])
    family = _family(runner.pid, 3)
    # what the actor's death does: its end of the guard pipe closes
    runner.retire()
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert alive == []
    assert not list((tmp_path / "node").rglob("*.out"))


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1
