"""Progress reports on a machine: a task says how many steps its job has done.

A task of ``hetsched up`` reports the steps its job has done so far (a counter that only
grows within a run) by writing ``{"steps": N}`` to ``$HETSCHED_PROGRESS_FILE``
(``$HETSCHED_CHECKPOINT_DIR/PROGRESS``) atomically (a temporary file in the same folder,
then a rename), or with ``hetsched progress --steps N`` (``POST /v1/progress``). The
:class:`ProgressWatcher` notices a changed file and dates the report by the file's
modification time, so how often the service looks does not blur the measured rate.

What a task writes is not trusted, as for checkpoint reports: read without following
links, from regular files of at most :data:`~hetsched.agent.checkpoints.MAX_REPORT_BYTES`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from hetsched.agent.checkpoints import (
    MAX_STEP,
    PROGRESS_FILE,
    CheckpointDirs,
    Mark,
    read_small_file,
)

__all__ = ["Progress", "ProgressWatcher", "parse_progress", "read_progress"]


@dataclass(frozen=True, slots=True)
class Progress:
    """Steps a job has done, reported at ``at`` (unix time)."""

    steps: int
    at: float


def parse_progress(data: object) -> int:
    """The steps of a progress report from its JSON value; ValueError naming what is wrong."""
    if not isinstance(data, dict):
        raise ValueError('expected {"steps": N}')
    unknown = sorted(set(data) - {"steps"})
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (expected steps)")
    steps = data.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= MAX_STEP:
        raise ValueError(f"steps: expected a whole number >= 0, got {steps!r}")
    return steps


def read_progress(dirs: CheckpointDirs, job_id: str) -> tuple[Mark, Progress | None]:
    """The progress file's identity (device, inode, size, mtime) and its report, if it
    reads as one; ``((0, 0, 0, 0), None)`` when there is no regular file."""
    mark, raw = read_small_file(dirs.of(job_id) / PROGRESS_FILE)
    if raw is None:
        return mark, None
    try:
        return mark, Progress(parse_progress(json.loads(raw)), mark[3] / 1e9)
    except (ValueError, UnicodeDecodeError):
        return mark, None


@dataclass(slots=True)
class ProgressWatcher:
    """Notices new ``PROGRESS`` files of the jobs that run here. A job is watched from the
    start of a run: a file already there (an earlier run's) is not a new report."""

    dirs: CheckpointDirs
    _marks: dict[str, Mark] = field(default_factory=dict)

    def watch(self, job_id: str) -> None:
        self._marks[job_id] = read_progress(self.dirs, job_id)[0]

    def forget(self, job_id: str) -> None:
        self._marks.pop(job_id, None)

    def watched(self) -> list[str]:
        return list(self._marks)

    def poll(self) -> list[tuple[str, Progress]]:
        """Jobs whose progress file changed since the last look, with the report read."""
        out: list[tuple[str, Progress]] = []
        for job_id, last in list(self._marks.items()):
            mark, report = read_progress(self.dirs, job_id)
            if mark == last:
                continue
            self._marks[job_id] = mark
            if report is not None:
                out.append((job_id, report))
        return out
