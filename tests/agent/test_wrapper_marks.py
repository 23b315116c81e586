"""What the task wrapper leaves in the exit file, run for real as the executor runs it (the
file as its stdin): ``started`` before the command runs, the command's status after it. A
restart reads an empty or missing file as a command that never ran (the service died
between making the file and spawning the wrapper), and ``started`` alone as one that ran
and vanished."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hetsched.agent.wrapper import FENCED_EXIT, never_ran, not_started, read_exit, wrapper_argv


def _run_wrapped(exit_file: Path, command: list[str], fence: Path | None = None) -> int:
    with open(exit_file, "wb") as stdin:
        return subprocess.run(
            [*wrapper_argv(fence, 5), *command], stdin=stdin, timeout=30, check=False
        ).returncode


def test_the_wrapper_says_started_before_the_command_and_its_status_after(
    tmp_path: Path,
) -> None:
    exit_file, seen = tmp_path / "task.exit", tmp_path / "seen"
    code = _run_wrapped(exit_file, ["sh", "-c", f"cat {exit_file} > {seen}; exit 7"])
    assert code == 7
    assert seen.read_text() == "started\n"  # written before the command ran
    assert exit_file.read_text() == "started\n7\n"
    assert read_exit(exit_file) == 7 and not never_ran(exit_file)


def test_an_exit_file_never_handed_to_a_wrapper_says_the_command_never_ran(
    tmp_path: Path,
) -> None:
    made = tmp_path / "made.exit"
    made.touch()
    assert never_ran(made) and read_exit(made) is None
    assert never_ran(tmp_path / "missing.exit")


def test_a_wrapper_gone_after_it_started_the_command_has_no_status(tmp_path: Path) -> None:
    exit_file = tmp_path / "task.exit"
    exit_file.write_text("started\n")
    assert read_exit(exit_file) is None and not never_ran(exit_file)


def test_a_fenced_wrapper_that_does_not_start_the_command_says_fenced(tmp_path: Path) -> None:
    lease = tmp_path / "lease"
    lease.write_text(f"{int(time.time()) - 60}\n")  # expired a minute ago
    exit_file, ran = tmp_path / "task.exit", tmp_path / "ran"
    code = _run_wrapped(exit_file, ["touch", str(ran)], fence=lease)
    assert code == FENCED_EXIT and not ran.exists()
    assert exit_file.read_text() == "fenced\n"
    assert read_exit(exit_file) == FENCED_EXIT and not_started(exit_file)


def test_a_fenced_wrapper_within_its_lease_runs_the_command_and_says_so(tmp_path: Path) -> None:
    lease = tmp_path / "lease"
    lease.write_text(f"{int(time.time()) + 600}\n")
    exit_file = tmp_path / "task.exit"
    assert _run_wrapped(exit_file, ["sh", "-c", "exit 3"], fence=lease) == 3
    assert exit_file.read_text() == "started\n3\n"
    assert read_exit(exit_file) == 3 and not not_started(exit_file)


@given(code=st.integers(0, 255))
def test_any_status_after_started_is_read_as_written(code: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        exit_file = Path(folder) / "task.exit"
        exit_file.write_text(f"started\n{code}\n")
        assert read_exit(exit_file) == code
        assert not never_ran(exit_file)
