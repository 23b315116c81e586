"""The executor with real processes: groups, exit codes, stop, adopt, sweep, runtime."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from hetsched.agent.executor import Executor, device_env, local_indices
from hetsched.cluster.placement import Placement
from hetsched.drivers import Exit, Launch, Start, Stop
from hetsched.keys import TaskKey
from hetsched.model.device import Device


def _wait_exit(executor: Executor, timeout: float = 10) -> Exit:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exits = executor.poll()
        if exits:
            return exits[0]
        time.sleep(0.02)
    raise AssertionError("no exit")


def _descendants(
    pid: int, at_least: int, name: str | None = None, timeout: float = 30
) -> list[psutil.Process]:
    """Process ``pid``'s descendants (named ``name``, if given) once there are
    ``at_least`` of them: waited for, never assumed after a fixed pause."""
    deadline = time.monotonic() + timeout
    while True:
        found = [
            p
            for p in psutil.Process(pid).children(recursive=True)
            if name is None or _name(p) == name
        ]
        if len(found) >= at_least:
            return found
        assert time.monotonic() < deadline, f"{pid}: {len(found)} of {at_least} descendants"
        time.sleep(0.02)


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:  # it ended meanwhile
        return ""


def _start(
    executor: Executor,
    command: list[str],
    job_id: str = "job1",
    devices: tuple[tuple[Device, int, int], ...] = (),
    **kwargs: Any,
) -> int:
    """Start one task through the executor protocol; its pid."""
    key = TaskKey(job_id, 0, 1)
    launch = Launch(tuple(command), kwargs.pop("env", {}), devices=devices, **kwargs)
    executor.start([Start(key, Placement("n", 1000, 100), launch=launch)], time.time())
    return executor.handles[str(key)].pid


def _stop(executor: Executor, grace_s: float | None = None, key: str = "job1/0#1") -> None:
    """Stop one task through the executor protocol (``grace_s`` None: the executor's)."""
    grace = executor.kill_grace_s if grace_s is None else grace_s
    stop = Stop(TaskKey.parse(key), Placement("n", 1000, 100), 0.0, grace, "stopped")
    executor.stop([stop], time.time())


@pytest.fixture
def executor(tmp_path: Path) -> Executor:
    # an instance of its own: a sweep kills every process of its instance, so tests in
    # parallel workers sharing one name would kill each other's processes
    return Executor(tmp_path, f"test-{uuid.uuid4().hex}", kill_grace_s=0.5)


def test_exit_codes_and_logs(executor: Executor) -> None:
    _start(executor, ["sh", "-c", "echo out; echo err >&2; exit 4"])
    done = _wait_exit(executor)
    assert (done.exit_code, done.stopped, done.reason) == (4, False, "exit code 4")
    out = executor.log_path("job1", 0, "stdout").read_text()
    assert out.endswith("out\n") and "run 1 of task 0" in out
    assert executor.log_path("job1", 0, "stderr").read_text() == "err\n"
    assert oct(executor.log_path("job1", 0, "stdout").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("plant", ["hard link", "symlink", "fifo"])
def test_a_planted_log_entry_is_replaced_never_written_through(
    executor: Executor, tmp_path: Path, plant: str
) -> None:
    # an earlier run's process could leave anything under its log's name in its job directory
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    log = executor.log_path("job1", 0, "stdout")
    log.parent.mkdir(parents=True, exist_ok=True)
    if plant == "hard link":
        os.link(victim, log)
    elif plant == "symlink":
        log.symlink_to(victim)
    else:
        os.mkfifo(log)
    _start(executor, ["echo", "written"])
    assert _wait_exit(executor).exit_code == 0
    assert victim.read_text() == "untouched\n"
    assert log.is_file() and not log.is_symlink() and log.stat().st_nlink == 1
    assert log.read_text().endswith("written\n")


def test_a_missing_program_is_a_failed_task_not_a_crash(executor: Executor) -> None:
    _start(executor, ["/no/such/program"])
    assert _wait_exit(executor).exit_code == 127


def test_each_task_is_its_own_process_group(executor: Executor) -> None:
    pid = _start(executor, ["sleep", "30"])
    assert os.getpgid(pid) == pid and os.getsid(pid) == pid
    _stop(executor)
    assert _wait_exit(executor).stopped


def test_stop_reaches_grandchildren_and_escalates_to_sigkill(executor: Executor) -> None:
    pid = _start(executor, ["sh", "-c", "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60"])
    family = _descendants(pid, 2)
    _stop(executor, grace_s=0.3)
    done = _wait_exit(executor)
    assert done.stopped and done.exit_code == -9
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert alive == []


def test_a_graceful_task_keeps_its_exit_status_when_stopped(executor: Executor) -> None:
    pid = _start(executor, ["sh", "-c", "trap 'echo bye; exit 0' TERM; sleep 30 & wait"])
    # its sleep runs: the trap is set (a fixed pause may end before, on a busy machine)
    _descendants(pid, 1, "sleep")
    _stop(executor, grace_s=5)
    done = _wait_exit(executor)
    assert done.stopped and done.exit_code == 0


def test_maximum_runtime(executor: Executor) -> None:
    _start(executor, ["sleep", "30"], max_runtime_s=0.2)
    done = _wait_exit(executor)
    assert done.reason == "exceeded its maximum runtime" and not done.stopped


def test_adopt_needs_the_same_pid_and_start_time(executor: Executor, tmp_path: Path) -> None:
    pid = _start(executor, ["sh", "-c", "sleep 0.5; exit 3"])
    handle = executor.handles.pop("job1/0#1")
    other = Executor(tmp_path, executor.instance)
    assert other.adopt("job1", 0, 1, pid, handle.pid_started + 5, None) is None
    adopted = other.adopt("job1", 0, 1, pid, handle.pid_started, None)
    assert adopted is not None and adopted.popen is None
    done = _wait_exit(other)
    # not our child any more in real life; the exit code comes from the wrapper's file
    assert done.exit_code == 3
    assert handle.popen is not None
    handle.popen.wait()


def test_an_adopted_task_survives_the_clock_moving_boot_time(
    executor: Executor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux gives the boot time in whole seconds, recomputed from the current clock, so a
    slewed or stepped clock moves every process's wall-clock start time. The adopted task
    is the same process still: it is adopted with a start a whole second off, and it is
    not reported ended when the boot time moves under it (it once was: "exit status
    unknown" for a task that ran on)."""
    pid = _start(executor, ["sleep", "30"])
    handle = executor.handles.pop("job1/0#1")
    other = Executor(tmp_path, executor.instance)
    assert other.adopt("job1", 0, 1, pid, handle.pid_started + 0.5, None) is None
    assert other.adopt("job1", 0, 1, pid, handle.pid_started - 1.0, None) is not None
    platform = psutil._psplatform  # type: ignore[attr-defined]
    booted = platform.boot_time()
    monkeypatch.setattr(platform, "boot_time", lambda: booted + 3600.0)
    assert other.poll() == []
    assert "job1/0#1" in other.handles
    monkeypatch.undo()
    os.killpg(pid, 9)
    assert handle.popen is not None
    handle.popen.wait(timeout=5)
    done = _wait_exit(other)
    assert done.key == TaskKey("job1", 0, 1)


def test_sweep_kills_processes_no_task_accounts_for(executor: Executor) -> None:
    keep = _start(executor, ["sleep", "30"])
    keep_popen = executor.handles.pop("job1/0#1").popen
    assert keep_popen is not None
    stray = _start(executor, ["sleep", "30"], "job2")
    killed = executor.sweep(["job1/0#1"])
    assert stray in killed and keep not in killed
    assert psutil.Process(keep).is_running()
    for handle in executor.handles.values():
        assert handle.popen is not None
        handle.popen.wait(timeout=5)
    os.killpg(keep, 9)
    keep_popen.wait(timeout=5)


def test_the_job_sees_its_devices_and_not_the_service_secrets(
    executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HETSCHED_TOKEN", "secret")
    gpu = Device("n/gpu1", "gpu", "nvidia", "A100")
    command = ["sh", "-c", 'echo "[$HETSCHED_TOKEN] $CUDA_VISIBLE_DEVICES $HETSCHED_DEVICES"']
    _start(executor, command, devices=((gpu, 500, 1),), env={"MINE": "1"})
    _wait_exit(executor)
    line = executor.log_path("job1", 0, "stdout").read_text().splitlines()[-1]
    assert line.startswith("[] 1 ")
    assert json.loads(line.split(" ", 2)[2])[0]["share"] == 500


def test_device_env_per_vendor_and_class() -> None:
    devices = [
        Device("n/gpu0", "gpu", "nvidia", "A100"),
        Device("n/gpu1", "gpu", "amd", "MI250"),
        Device("n/gpu2", "gpu", "nvidia", "A100"),
        Device("n/fpga0", "fpga", "xilinx", "U250"),
    ]
    index = local_indices(devices)
    assert index == {"n/gpu0": 0, "n/gpu1": 0, "n/gpu2": 1, "n/fpga0": 0}
    env = device_env([(d, 1000, index[d.id]) for d in devices[1:]])
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["ROCR_VISIBLE_DEVICES"] == env["HIP_VISIBLE_DEVICES"] == "0"
    classes = [d["class"] for d in json.loads(env["HETSCHED_DEVICES"])]
    assert classes == ["gpu", "gpu", "fpga"]
    assert device_env([])["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize(
    ("expiry_offset", "command", "expected"),
    [
        # the lease expired: the wrapper does not start the command, and says so
        (-5, ["sh", "-c", "echo ran > ran"], (125, True, "not started: its federation's")),
        # a live lease, and a command that itself exits 125: an ordinary failure
        (60, ["sh", "-c", "echo ran > ran; exit 125"], (125, False, "exit code 125")),
        (60, ["sh", "-c", "echo ran > ran"], (0, False, "exit code 0")),
    ],
)
def test_a_fenced_task_not_started_is_told_from_one_that_exits_125(
    executor: Executor,
    tmp_path: Path,
    expiry_offset: int,
    command: list[str],
    expected: tuple[int, bool, str],
) -> None:
    lease = tmp_path / "fed.lease"
    lease.write_text(f"{int(time.time()) + expiry_offset}\n{{}}\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    _start(executor, command, workdir=str(workdir), fence=lease)
    done = _wait_exit(executor)
    assert (done.exit_code, done.not_started) == expected[:2]
    assert done.reason.startswith(expected[2])
    assert (workdir / "ran").exists() is not done.not_started
    assert executor.recorded_exit("job1", 0, 1) == expected[0]


def test_a_task_that_cannot_start_and_a_stop_of_none_are_reported_by_the_next_poll(
    executor: Executor, tmp_path: Path
) -> None:
    # the protocol's start and stop return at once; what they cannot do comes back as exits
    key = TaskKey("job1", 0, 1)
    bad = Launch(("true",), {}, workdir=str(tmp_path / "no such directory"))
    executor.start([Start(key, Placement("n", 1000, 100), launch=bad)], time.time())
    executor.start([Start(TaskKey("job2", 0, 1), Placement("n", 1000, 100))], time.time())
    _stop(executor, key="job3/0#1")
    assert executor.handles == {} and executor.next_due() is not None
    exits = {(e.job_id, e.succeeded, e.stopped, e.reason.split(":")[0]) for e in executor.poll()}
    assert exits == {
        ("job1", False, False, "cannot start"),
        ("job2", False, False, "cannot start"),
        ("job3", False, True, "stopped before it ran"),
    }
    assert executor.poll() == [] and executor.next_due() is None
