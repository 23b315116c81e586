"""The session check for task processes that outlive their tests finds them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from leaks import find_leftovers, kill_leftovers, wait_for_none


def _spawn(cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["sleep", "30"], cwd=cwd, env={**os.environ, **env}, start_new_session=True
    )


def test_a_task_process_under_the_base_directory_is_found_and_killed(tmp_path: Path) -> None:
    job_dir = tmp_path / "home" / "jobs" / "j1"
    job_dir.mkdir(parents=True)
    task = _spawn(job_dir, {"HETSCHED_INSTANCE": "leak-test"})
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
    (home / "instance").write_text("abc123\n")
    task = _spawn(Path("/"), {"HETSCHED_INSTANCE": "abc123"})
    try:
        assert [f.pid for f in find_leftovers(tmp_path)] == [task.pid]
    finally:
        task.kill()
        task.wait(timeout=10)
