"""The checkpoint protocol on a machine: directories, what a task is told, the reports it
writes and the notices it gets.

- Every job has a checkpoint directory, ``<home>/checkpoints/<job id>``: kept across the
  job's runs (and nodes of one service home), owned by the account its tasks run as.
- A task is told (:func:`task_env`): ``HETSCHED_CHECKPOINT_DIR``; when its run resumes,
  ``HETSCHED_RESUME_FROM`` (the path the checkpoint was reported with, else the directory)
  and ``HETSCHED_RESUME_STEP`` (when one was reported); ``HETSCHED_NOTICE_FILE`` and
  ``HETSCHED_NOTICE_SIGNAL``; ``HETSCHED_RESIZE_FILE`` (a live elastic job's new count is
  written there); ``HETSCHED_CHECKPOINT_INTERVAL`` when the job declares one;
  and how to report (``HETSCHED_API``, ``HETSCHED_TASK_TOKEN``, ``HETSCHED_CA_PEM`` when
  the service gives a CA bundle for an https API, and ``hetsched`` on its ``PATH``).
- A task reports a checkpoint by writing ``{"step": N, "path": "..."}`` to
  ``$HETSCHED_CHECKPOINT_DIR/CHECKPOINT`` (a temporary file, then a rename), which the
  :class:`ReportWatcher` notices, or through the API (``hetsched checkpoint``).
- A task reports progress (steps done) by writing ``{"steps": N}`` to
  ``$HETSCHED_PROGRESS_FILE`` (``$HETSCHED_CHECKPOINT_DIR/PROGRESS``) the same way, or with
  ``hetsched progress`` (:mod:`hetsched.agent.progress`).
- A notice writes ``$HETSCHED_CHECKPOINT_DIR/NOTICE`` (``{"deadline": ..., "signal": ...,
  "reason": ...}``) before the signal is sent; a new run starts without it.

What a task writes is not trusted: reports are read without following links, from regular
files of at most :data:`MAX_REPORT_BYTES`, and validated.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from hetsched.model.checkpoint import DEFAULT_SIGNAL, Checkpointing, SavedCheckpoint

__all__ = [
    "MAX_PATH_LENGTH",
    "MAX_REPORT_BYTES",
    "NOTICE_FILE",
    "PROGRESS_FILE",
    "REPORT_FILE",
    "RESIZE_FILE",
    "CheckpointDirs",
    "JobFileWatcher",
    "Mark",
    "Report",
    "ReportWatcher",
    "parse_report",
    "read_small_file",
    "task_env",
]

REPORT_FILE = "CHECKPOINT"
NOTICE_FILE = "NOTICE"
#: a live elastic job's new count (``{"run", "replicas", "time", "reason"}``)
RESIZE_FILE = "RESIZE"
PROGRESS_FILE = "PROGRESS"
MAX_REPORT_BYTES = 65536
MAX_PATH_LENGTH = 4096
#: steps are reported as integers up to this (a signed 64-bit integer)
MAX_STEP = 2**63 - 1


R = TypeVar("R")

#: a file's identity: device, inode, size, mtime (ns); all 0 when there is no file
Mark = tuple[int, int, int, int]


def read_small_file(path: Path) -> tuple[Mark, bytes | None]:
    """A file a task writes for the service, read safely: its identity and its bytes, or
    None for the bytes when it is not a regular file (links are not followed) or is larger
    than ``MAX_REPORT_BYTES``; ``((0, 0, 0, 0), None)`` when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return (0, 0, 0, 0), None
    try:
        info = os.fstat(fd)
        mark = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_REPORT_BYTES:
            return mark, None
        return mark, os.read(fd, MAX_REPORT_BYTES + 1)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Report:
    """A checkpoint a task reported: the step it reached and where it saved."""

    step: int
    path: str = ""


def parse_report(data: object) -> Report:
    """A report from its JSON value; ValueError naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError('expected {"step": N, "path": "..."}')
    unknown = sorted(set(data) - {"step", "path"})
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (expected step and path)")
    step = data.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ValueError(f"step: expected a whole number >= 0, got {step!r}")
    path = data.get("path", "")
    if not isinstance(path, str) or len(path) > MAX_PATH_LENGTH or "\x00" in path:
        raise ValueError(f"path: expected text of at most {MAX_PATH_LENGTH} characters")
    return Report(step, path)


class CheckpointDirs:
    """The checkpoint directories under a service home."""

    def __init__(self, home: Path) -> None:
        self.root = home / "checkpoints"

    def of(self, job_id: str) -> Path:
        return self.root / job_id

    def prepare(self, job_id: str, owner: tuple[int, int] | None = None) -> Path:
        """The job's directory, created if needed (mode 0700, owned by ``owner``'s uid and
        gid when the task runs as another account); a notice left by an earlier run is
        removed."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o711)
        directory = self.of(job_id)
        directory.mkdir(exist_ok=True, mode=0o700)
        if owner is not None:
            info = os.lstat(directory)
            if (info.st_uid, info.st_gid) != owner:
                os.chown(directory, *owner, follow_symlinks=False)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / NOTICE_FILE)
        return directory

    def notify(self, job_id: str, deadline: float, signal: str, reason: str) -> None:
        """Write the notice file (atomically) before a notice signal is sent."""
        body = {"deadline": deadline, "signal": signal, "reason": reason}
        self._write(job_id, NOTICE_FILE, body)

    def resized(self, job_id: str, run: int, replicas: int, at: float, reason: str) -> None:
        """Write the resize file (atomically): a live elastic job's run ``run`` has
        ``replicas`` tasks from ``at`` on (its running tasks read it; new ranks are told
        at their start)."""
        body = {"run": run, "replicas": replicas, "time": at, "reason": reason}
        self._write(job_id, RESIZE_FILE, body)

    def _write(self, job_id: str, name: str, body: dict[str, object]) -> None:
        directory = self.of(job_id)
        if not directory.is_dir():
            return
        temporary = directory / f".{name}.{os.getpid()}"
        with contextlib.suppress(OSError):
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps(body) + "\n")
            os.replace(temporary, directory / name)

    def read_report(self, job_id: str) -> tuple[Mark, Report | None]:
        """The report file's identity (device, inode, size, mtime) and its report, if it
        reads as one; ``((0, 0, 0, 0), None)`` when there is no regular file."""
        mark, raw = read_small_file(self.of(job_id) / REPORT_FILE)
        if raw is None:
            return mark, None
        try:
            return mark, parse_report(json.loads(raw))
        except (ValueError, UnicodeDecodeError):
            return mark, None


class JobFileWatcher(Generic[R]):
    """Notices new versions of a file each job's tasks write (a report), through
    :meth:`_read`. A job is watched from the start of a run: a file already there (an
    earlier run's) is not a new report; one that does not read as a report is skipped
    until it changes again."""

    def __init__(self, dirs: CheckpointDirs) -> None:
        self.dirs = dirs
        self._marks: dict[str, Mark] = {}

    @abstractmethod
    def _read(self, job_id: str) -> tuple[Mark, R | None]:
        """The file's identity and the report it holds, if it reads as one."""

    def watch(self, job_id: str) -> None:
        """Start (or restart, for a new run) watching ``job_id``'s file."""
        self._marks[job_id] = self._read(job_id)[0]

    def forget(self, job_id: str) -> None:
        self._marks.pop(job_id, None)

    def watched(self) -> list[str]:
        """The jobs watched."""
        return list(self._marks)

    def poll(self) -> list[tuple[str, R]]:
        """Jobs whose file changed since the last look, with the report read."""
        out: list[tuple[str, R]] = []
        for job_id, last in list(self._marks.items()):
            mark, report = self._read(job_id)
            if mark == last:
                continue
            self._marks[job_id] = mark
            if report is not None:
                out.append((job_id, report))
        return out


class ReportWatcher(JobFileWatcher[Report]):
    """Notices new ``CHECKPOINT`` files of the jobs that run here."""

    def _read(self, job_id: str) -> tuple[Mark, Report | None]:
        return self.dirs.read_report(job_id)


def task_env(
    directory: Path,
    resume: SavedCheckpoint | None,
    spec: Checkpointing | None,
    api: str,
    token: str,
    bin_dir: str,
    path: str,
    ca_pem: str | None = None,
) -> dict[str, str]:
    """What a task is told about checkpoints (see the module docstring). ``path`` is the
    ``PATH`` it would otherwise get; ``bin_dir`` (where ``hetsched`` is) goes first;
    ``ca_pem`` is the CA bundle an https ``api`` is verified with (``HETSCHED_CA_PEM``)."""
    env = {
        "HETSCHED_CHECKPOINT_DIR": str(directory),
        "HETSCHED_NOTICE_FILE": str(directory / NOTICE_FILE),
        "HETSCHED_RESIZE_FILE": str(directory / RESIZE_FILE),
        "HETSCHED_NOTICE_SIGNAL": spec.signal if spec is not None else DEFAULT_SIGNAL,
        "HETSCHED_PROGRESS_FILE": str(directory / PROGRESS_FILE),
        "HETSCHED_API": api,
        "HETSCHED_TASK_TOKEN": token,
        "PATH": bin_dir + (os.pathsep + path if path else ""),
    }
    if ca_pem is not None:
        env["HETSCHED_CA_PEM"] = ca_pem
    if spec is not None and spec.interval_s is not None:
        env["HETSCHED_CHECKPOINT_INTERVAL"] = f"{spec.interval_s:g}"
    if resume is not None:
        env["HETSCHED_RESUME_FROM"] = resume.path or str(directory)
        if resume.step is not None:
            env["HETSCHED_RESUME_STEP"] = str(resume.step)
    return env
