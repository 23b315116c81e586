"""Resizing a running elastic job: the book's half (see ``hetsched.scheduler.elastic`` for
when the core grows or shrinks one).

Two ways, as the job declares (``resize``):

- **checkpoint** (the default): its run stops with a notice, as for a migration (a Migrate of
  kind ``resize``), and the next run starts at the new count once every task has stopped.
  The tasks it keeps (ranks below the new count) keep their placements: each one's
  allocation is carried to the next run at once, so nothing else takes it meanwhile, and
  its stopping task then frees nothing when it ends. Lost work is counted as for a
  preemption.
- **live**: the tasks it keeps go on running. A grow binds the new ranks into the running
  run; a shrink stops the ranks from the new count up (a Kill each). The job's transition
  says the new count; its tasks learn it from the Bind (``replicas``).

A job shrunk for another job (``for_job``) is that job's victim: it waits until the
stopped tasks have stopped, and the pair is recorded as for a preemption (no loops).

:class:`Resizes` is a base of :class:`~hetsched.scheduler.jobbook.JobBook`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetsched.cluster.placement import Placement
from hetsched.keys import TaskKey
from hetsched.model.job import Job, ResizeMode
from hetsched.model.lifecycle import JobState
from hetsched.scheduler.actions import Action, Bind, Change, Kill, Migrate, MigrationKind
from hetsched.scheduler.checkpoints import keep_all, loss_note
from hetsched.scheduler.records import JobRecord
from hetsched.scheduler.restore import Restores

__all__ = ["Resizes", "resizable"]


def resizable(record: JobRecord) -> bool:
    """A running elastic job that may change its count now: nothing moving, stopping or
    finished in its run."""
    return (
        record.job.elastic
        and record.state is JobState.RUNNING
        and bool(record.placements)
        and not (record.moving or record.stopping or record.finished)
    )


class Resizes(Restores):
    """Growing and shrinking running elastic jobs (see the module docstring)."""

    _nominations: dict[str, list[str]]

    if TYPE_CHECKING:
        # the book's own (JobBook)
        def emit(self, action: Action) -> None: ...

        def _settle(self, victim: JobRecord) -> None: ...

        def _move(
            self, record: JobRecord, target: JobState, now: float, cause: str, change: Change
        ) -> None: ...

    def grow(
        self, record: JobRecord, new: dict[int, Placement], grace_s: float, now: float
    ) -> None:
        """Grow ``record`` by the tasks ``new`` (ranks from its count up), whose placements
        are allocated already: to its running run (live), or to its next run (checkpoint)."""
        old = record.count
        count = old + len(new)
        if record.job.resize is ResizeMode.LIVE:
            record.placements.update(new)
            record.count = count
            record.counts.append((now, count))
            cause = f"grew live from {old} to {count} tasks on idle capacity"
            self._move(record, JobState.RUNNING, now, cause, Change.RESIZED)
            placed = tuple(sorted(new.items()))
            self.emit(Bind(record.id, record.run, placed, record.checkpoint, count))
            return
        kept = dict(record.placements)
        reason = f"growing from {old} to {count} tasks on idle capacity"
        self._restart(record, kept, new, None, grace_s, reason, now)

    def shrink(
        self, record: JobRecord, count: int, for_job: JobRecord, grace_s: float, now: float
    ) -> None:
        """Shrink ``record`` to ``count`` tasks (at least its minimum) to make room for
        ``for_job``, which waits for the stopped tasks as for a victim."""
        job = record.job
        assert job.min_replicas is not None and job.min_replicas <= count < record.count
        old = record.count
        record.preemptions += 1
        record.preempted_by.add(for_job.id)
        for_job.preempted_jobs.add(record.id)
        for_job.nominated.add(record.id)
        self._nominations.setdefault(record.id, []).append(for_job.id)
        if job.resize is not ResizeMode.LIVE:
            kept = {t: p for t, p in record.placements.items() if t < count}
            reason = f"shrinking from {old} to {count} tasks to make room for {for_job.id}"
            self._restart(record, kept, {}, for_job, grace_s, reason, now)
            return
        run = record.run
        removed = sorted(t for t in record.placements if t >= count)
        for task in removed:
            record.stopping[TaskKey(record.id, task, run)] = record.placements.pop(task)
        record.count = count
        record.counts.append((now, count))
        cause = f"shrank live from {old} to {count} tasks to make room for {for_job.id}"
        self._move(record, JobState.RUNNING, now, cause, Change.RESIZED)
        for task in removed:
            self.emit(Kill(record.id, task, run, cause))
        self._settle(record)

    def _restart(
        self,
        record: JobRecord,
        kept: dict[int, Placement],
        new: dict[int, Placement],
        for_job: JobRecord | None,
        grace_s: float,
        reason: str,
        now: float,
    ) -> None:
        """Resize through a restart: the kept tasks' allocations carry to the next run
        (``new`` is allocated to it already), the current run stops with a notice."""
        job: Job = record.job
        run = record.run
        for task, placement in kept.items():
            self.unallocate(TaskKey(record.id, task, run))
            self.allocate(TaskKey(record.id, task, run + 1), placement, job)
        record.moving = {**kept, **new}
        record.resized_from = record.count
        record.count = len(record.moving)
        reason += f"; it {loss_note(record, now)}"
        keep_all(record, now)
        tasks = tuple(sorted(record.placements))
        for task in tasks:
            record.stopping[TaskKey(record.id, task, run)] = record.placements.pop(task)
        self._move(record, JobState.RUNNING, now, reason, Change.RESIZING)
        target = for_job.id if for_job is not None else ""
        placements = tuple(sorted(record.moving.items()))
        kind = MigrationKind.RESIZE
        self.emit(
            Migrate(record.id, run, tasks, placements, job.notice_s, grace_s, reason, kind, target)
        )
        self._settle(record)
