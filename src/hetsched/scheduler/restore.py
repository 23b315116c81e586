"""Taking jobs back after the driver restarted: on their recorded placements, without a new
scheduling decision, and with no action emitted (the driver knows the jobs already).

Three shapes of job come back: one that ran (:meth:`Restores.restore`), one that waited
while the tasks of its last run were still stopping (:meth:`Restores.restore_stopping`),
and one that was moving (:meth:`Restores.restore_moving`). Each allocates all or nothing
under the core's own task keys and charges the usage ledger, so quotas and fair shares see
the job as before the restart; when a placement does not fit, nothing changes.

:class:`Restores` is a base of :class:`~hetsched.scheduler.jobbook.JobBook`, whose books it
fills; the names it uses of the book are declared here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError, AllocKey, ClusterState
from hetsched.cluster.usage import Ledger, Usage
from hetsched.framework.profile import ProfileSpec
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState
from hetsched.queueing.waiting import WaitingQueue
from hetsched.scheduler.deadlines import Deadlines
from hetsched.scheduler.quota import QuotaTree
from hetsched.scheduler.records import JobRecord
from hetsched.scheduler.tally import Tally
from hetsched.scheduler.workflow import Workflows

__all__ = ["Restores"]


class Restores:
    """Restoring jobs into the book (see the module docstring)."""

    state: ClusterState
    profile: ProfileSpec
    quotas: QuotaTree
    ledger: Ledger
    jobs: dict[str, JobRecord]
    queue: WaitingQueue
    tally: Tally
    deadlines: Deadlines
    _live: dict[str, JobRecord]
    elastic: dict[str, JobRecord]
    _seq: int
    workflow: Workflows

    if TYPE_CHECKING:
        # the book's own (JobBook)
        def allocate(self, key: TaskKey, placement: Placement, job: Job) -> None: ...

        def unallocate(self, key: AllocKey) -> None: ...

        def request_of(self, job: Job, tasks: int) -> Usage: ...

        def _max_runtime(self, job: Job) -> float | None: ...

    def _allocate_all(self, job: Job, placements: Mapping[int, Placement], run: int) -> None:
        """Allocate a job the core does not know yet its tasks' ``placements`` of ``run``,
        all or nothing: ValueError if the job is known, AllocationError (nothing held) if
        its queue refuses it or a placement does not fit."""
        if job.id in self.jobs:
            raise ValueError(f"job {job.id} is already in the core")
        problem = self.quotas.submit_error(job, self.request_of(job, job.gang_min))
        if problem is not None:
            raise AllocationError(f"job {job.id}: {problem}")
        taken: list[TaskKey] = []
        try:
            for task, placement in sorted(placements.items()):
                key = TaskKey(job.id, task, run)
                self.allocate(key, placement, job)
                taken.append(key)
        except AllocationError:
            for key in reversed(taken):
                self.unallocate(key)
            raise

    def restore(
        self,
        job: Job,
        run: int,
        placements: Mapping[int, Placement],
        finished: Iterable[int] = (),
        restarts: int = 0,
        started: float | None = None,
        now: float = 0.0,
        checkpoint: SavedCheckpoint | None = None,
    ) -> JobRecord:
        """Take back a job that was running before the driver restarted, on its recorded
        placements, without a new scheduling decision.

        Allocates under the core's own task keys and charges the usage ledger (quotas, fair
        share); raises AllocationError and changes nothing if a placement does not fit or
        the job could never have been admitted (unknown queue, past a hard limit). Emits no
        action: the driver knows the job already (its history says "restored").
        """
        if job.id in self.jobs:
            raise ValueError(f"job {job.id} is already in the core")
        if job.best_effort:
            self.state.best_effort_jobs.add(job.id)
        try:
            self._allocate_all(job, placements, run)
        except AllocationError:
            self.state.best_effort_jobs.discard(job.id)
            raise
        record = JobRecord(job, self._seq, queued_since=job.submit_time)
        self._seq += 1
        self.jobs[job.id] = record
        record.move(JobState.PENDING, job.submit_time, "submitted")
        record.run = run
        record.restarts = restarts
        record.placements = dict(placements)
        record.finished = set(finished)
        record.started = now if started is None else started
        record.checkpoint = checkpoint
        usage: Mapping[str, int] = self.ledger.by_job.get(job.id, {})
        record.borrowing = self.quotas.borrowing(
            job.queue, self.ledger, {f for f, a in usage.items() if a > 0}
        )
        record.move(JobState.RUNNING, now, f"run {run}: restored after a restart")
        self._go_live(record)
        if job.elastic:  # its count: the ranks its run has (none is ever skipped)
            record.count = max([*placements, *record.finished]) + 1
            record.counts.append((now, record.count))
        self.tally.entered(record)
        if record.has_unplaced:
            self.queue.add(record)
        self.deadlines.run_started(record, self._max_runtime(job))
        return record

    def _go_live(self, record: JobRecord) -> None:
        """A restored job is live (and, elastic, may grow): no queue entry, no count."""
        self._live[record.id] = record
        if record.job.elastic:
            self.elastic[record.id] = record

    def restore_stopping(
        self,
        job: Job,
        run: int,
        stopping: Mapping[int, Placement],
        restarts: int = 0,
        queued_since: float | None = None,
        now: float = 0.0,
        checkpoint: SavedCheckpoint | None = None,
    ) -> JobRecord:
        """Take back a job that waited in the queue before the driver restarted while the
        tasks of its run ``run`` were still stopping (a preemption notice in progress): it
        waits again, and its stopping tasks hold ``stopping`` until each one's TaskStopped
        (a checkpointable job does not start again before). Allocates as :meth:`restore`
        does, raising AllocationError and changing nothing when one does not fit; emits no
        action."""
        self._allocate_all(job, stopping, run)
        since = now if queued_since is None else min(queued_since, now)
        record = JobRecord(job, self._seq, queued_since=since, run=run, restarts=restarts)
        record.checkpoint = checkpoint
        self._seq += 1
        self.jobs[job.id] = record
        record.move(JobState.PENDING, now, f"restored after a restart; run {run} still stopping")
        record.stopping = {TaskKey(job.id, t, run): p for t, p in stopping.items()}
        self._go_live(record)
        self.tally.entered(record)
        self.queue.add(record)
        self.deadlines.queued(record, self.profile.timeouts.max_pending_s)
        self.tally.queued(record)
        if job.best_effort:
            self.state.best_effort_jobs.add(job.id)
        return record

    def restore_moving(
        self,
        job: Job,
        run: int,
        stopping: Mapping[int, Placement],
        moving: Mapping[int, Placement],
        started: float,
        moved_at: float,
        now: float,
        restarts: int = 0,
        checkpoint: SavedCheckpoint | None = None,
        migrations: int = 1,
    ) -> JobRecord:
        """Take back a job that was moving when the driver restarted (a Migrate's notice in
        progress): it runs, the tasks of its run ``run`` (started at ``started``) are still
        stopping and hold ``stopping``, and its destination ``moving`` is held for run
        ``run + 1``, which starts there once each stopping task's TaskStopped has come, as
        if no restart happened. Allocates all or nothing (AllocationError, nothing changed,
        when one does not fit); emits no action. A stopping task whose next-run task holds
        the same placement (a resize keeps it) carried its allocation to it: it is held once."""
        held = {t: p for t, p in stopping.items() if moving.get(t) != p}
        self._allocate_all(job, held, run)
        taken: list[TaskKey] = []
        try:
            for task, placement in sorted(moving.items()):
                self.allocate(TaskKey(job.id, task, run + 1), placement, job)
                taken.append(TaskKey(job.id, task, run + 1))
        except AllocationError:
            for key in [*reversed(taken), *(TaskKey(job.id, t, run) for t in held)]:
                self.unallocate(key)
            raise
        record = JobRecord(job, self._seq, queued_since=job.submit_time, run=run)
        self._seq += 1
        self.jobs[job.id] = record
        record.move(JobState.PENDING, job.submit_time, "submitted")
        record.restarts, record.started, record.checkpoint = restarts, started, checkpoint
        record.stopping = {TaskKey(job.id, t, run): p for t, p in stopping.items()}
        record.moving = dict(moving)
        record.migrations, record.moved_at = migrations, moved_at
        record.move(JobState.RUNNING, now, f"run {run}: restored after a restart, moving")
        self._go_live(record)
        if job.elastic:  # a resize in progress: it arrives at the count it moves with
            record.count = len(moving)
            if len(moving) != len(stopping):
                record.resized_from = len(stopping)
        self.tally.entered(record)
        if job.best_effort:
            self.state.best_effort_jobs.add(job.id)
        self.deadlines.run_started(record, self._max_runtime(job))
        return record

    def known_end(self, job_id: str, state: JobState, name: str = "") -> None:
        """A job that ended before the driver restarted, which the core has no record of:
        the jobs submitted again that wait for it learn how it ended (``name``: what
        their explanations call it)."""
        self.workflow.known_end(job_id, state, name)

    def known_elements(
        self, array_id: str, ended: Mapping[int, JobState], live: Iterable[int]
    ) -> None:
        """What became of the created elements of array ``array_id`` before the driver
        restarted (``ended`` by index, and ``live``: restored, or submitted again after
        the array), for when the array is submitted again: those are not created twice."""
        self.workflow.known_elements(array_id, ended, list(live))
