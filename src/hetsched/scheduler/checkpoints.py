"""Checkpoints in the core: taking a report, and what stopping a job would cost it.

The core keeps each job's last checkpoint (:attr:`JobRecord.checkpoint`). A report counts
when it names the job's current run and a task that runs or stops in it (a checkpoint saved
inside a notice is the one the next run resumes from), and is not older than the one kept.

**Lost work** is the time since the last checkpoint of the current run, or since the run
started without one: what a stop now would throw away. A job that checkpoints continuously
(``interval_s`` 0) loses nothing.
"""

from __future__ import annotations

from hetsched.keys import TaskKey
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.scheduler.events import TaskCheckpointed
from hetsched.scheduler.records import JobRecord

__all__ = ["RECENT_S", "keep_all", "loss_note", "note_checkpoint", "work_lost"]

#: lost work up to this many seconds is "almost nothing" in explanations
RECENT_S = 60.0


def note_checkpoint(record: JobRecord, event: TaskCheckpointed, now: float) -> bool:
    """Keep the checkpoint ``event`` reports, if it counts (see the module docstring)."""
    if event.run != record.run:
        return False
    key = TaskKey(record.id, event.task, event.run)
    if event.task not in record.placements and key not in record.stopping:
        return False
    at = now if event.at is None else min(event.at, now)
    last = record.checkpoint
    if last is not None and last.time > at:
        return False
    record.checkpoint = SavedCheckpoint(at, event.run, event.step, event.path, event.progress)
    return True


def keep_all(record: JobRecord, now: float) -> None:
    """The job's run is being stopped now: a job that checkpoints continuously has saved
    everything up to now (its checkpoint, with no step or path: the task said nothing)."""
    spec = record.job.checkpoint
    if spec is not None and spec.continuous and record.state is not None:
        record.checkpoint = SavedCheckpoint(now, record.run)


def work_lost(record: JobRecord, now: float) -> float:
    """Seconds of work a stop of the job's current run would lose now."""
    spec = record.job.checkpoint
    if spec is not None and spec.continuous:
        return 0.0
    since = record.started if record.started is not None else now
    saved = record.checkpoint
    if saved is not None and saved.run == record.run:
        since = max(since, saved.time)
    return max(0.0, now - since)


def loss_note(record: JobRecord, now: float) -> str:
    """What stopping the job now costs it, in words: ``loses 12 s of work (checkpointed at
    t=88)``, ``loses almost nothing: ...``, with the notice it gets to save."""
    spec = record.job.checkpoint
    if spec is not None and spec.continuous:
        return "loses no work: it checkpoints continuously"
    lost = work_lost(record, now)
    saved = record.checkpoint
    where = ""
    if saved is not None and saved.run == record.run:
        where = f" (checkpointed at {saved.describe()})"
    if spec is not None and spec.notice_s > 0:
        return (
            f"gets a {spec.notice_s:g}s notice to checkpoint; loses at most {lost:.0f}s of "
            f"work{where}"
        )
    if saved is not None and saved.run == record.run and lost <= RECENT_S:
        return f"loses almost nothing: {lost:.0f}s of work since its checkpoint{where}"
    return f"loses {lost:.0f}s of work{where}"
