"""The session check for task processes that outlive their tests finds them."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

from leaks import find_leftovers, kill_leftovers, wait_for_none


def _spawn(cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    # only the marker given here: the test runner's own environment carries none
    base = {k: v for k, v in os.environ.items() if k != "HETSCHED_INSTANCE"}
    return subprocess.Popen(["sleep", "30"], cwd=cwd, env={**base, **env}, start_new_session=True)


def test_a_task_process_under_the_base_directory_is_found_and_killed(tmp_path: Path) -> None:
    job_dir = tmp_path / "home" / "jobs" / "j1"
    job_dir.mkdir(parents=True)
    # instance names of their own, so that runs in parallel never see each other's
    task = _spawn(job_dir, {"HETSCHED_INSTANCE": f"leak-{uuid.uuid4().hex}"})
    other = _spawn(tmp_path, {})  # not a task: no instance marker
    try:
        found = find_leftovers(tmp_path)
        assert [f.pid for f in found] == [task.pid]
        assert found[0].where == str(job_dir)
        kill_leftovers(found)
        task.wait(timeout=10)
        assert wait_for_none(tmp_path, timeout_s=5) == []
    finally:
        for proc in (task, other):
            proc.kill()
            proc.wait(timeout=10)


def test_a_task_of_a_test_instance_elsewhere_is_found_by_its_instance(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    instance = f"leak-{uuid.uuid4().hex}"
    (home / "instance").write_text(instance + "\n")
    task = _spawn(Path("/"), {"HETSCHED_INSTANCE": instance})
    try:
        assert [f.pid for f in find_leftovers(tmp_path)] == [task.pid]
    finally:
        task.kill()
        task.wait(timeout=10)
