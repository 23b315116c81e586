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
from dataclasses import dataclass

from hetsched.agent.checkpoints import (
    MAX_STEP,
    PROGRESS_FILE,
    CheckpointDirs,
    JobFileWatcher,
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


class ProgressWatcher(JobFileWatcher[Progress]):
    """Notices new ``PROGRESS`` files of the jobs that run here."""

    def _read(self, job_id: str) -> tuple[Mark, Progress | None]:
        return read_progress(self.dirs, job_id)
