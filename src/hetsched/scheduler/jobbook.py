"""The book of jobs: the core's records, kept in step with the cluster state and the usage
ledger, and every change of a job's state, told to the driver as it happens.

:class:`JobBook` is the half of the core that holds state; :class:`~hetsched.scheduler.
core.Scheduler` (which extends it) applies events, time-based rules and scheduling cycles
to it. Every allocation goes through :meth:`JobBook.allocate` and every release through
:meth:`JobBook.release` (or :meth:`JobBook.unallocate` to undo a trial), so the usage ledger
always matches the cluster state; every state change goes through :meth:`JobBook._move`,
which records it and emits its :class:`JobTransition`. Taking jobs back after a driver
restart (``restore`` and its kin) is :class:`~hetsched.scheduler.restore.Restores`, a base,
and so is :class:`~hetsched.scheduler.resize.Resizes` (growing and shrinking elastic jobs).
"""

from __future__ import annotations

from collections.abc import Mapping

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError, AllocKey, ClusterState
from hetsched.cluster.usage import Ledger, Usage, placement_usage, request_usage
from hetsched.framework.profile import ProfileError, ProfileSpec, check_queues, check_rounds
from hetsched.framework.status import Code
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.model.lifecycle import TERMINAL, JobState
from hetsched.model.speed import SpeedTable
from hetsched.queueing.waiting import WaitingQueue
from hetsched.scheduler.actions import (
    Action,
    Bind,
    Change,
    JobTransition,
    Kill,
    Migrate,
    MigrationKind,
    Preempt,
    PreemptionKind,
)
from hetsched.scheduler.checkpoints import keep_all, loss_note
from hetsched.scheduler.deadlines import Deadlines
from hetsched.scheduler.explain import Explanation
from hetsched.scheduler.quota import QuotaTree
from hetsched.scheduler.records import BlockedBy, JobRecord, MoveBook
from hetsched.scheduler.resize import Resizes
from hetsched.scheduler.tally import Tally
from hetsched.scheduler.units import Units
from hetsched.scheduler.workflow import Workflows

__all__ = ["JobBook"]

#: the Change a transition into each terminal state records
_ENDS = {
    JobState.SUCCEEDED: Change.SUCCEEDED,
    JobState.FAILED: Change.FAILED,
    JobState.CANCELLED: Change.CANCELLED,
    JobState.REJECTED: Change.REJECTED,
}


class JobBook(Resizes):
    """Records, allocations and transitions (see the module docstring)."""

    #: jobs with tasks to place, indexed by why they wait (set up by the Scheduler, which
    #: has the queue sort)
    queue: WaitingQueue

    def __init__(self, state: ClusterState, profile: ProfileSpec | None = None) -> None:
        self.state = state
        self.profile = profile or ProfileSpec()
        errors = check_queues(self.profile) + check_rounds(self.profile)
        if errors:
            raise ProfileError("\n".join(errors))
        overcommit = self.profile.overcommit
        if (state.cpu_factor, state.mem_factor) != (overcommit.cpu, overcommit.memory):
            state.set_overcommit(overcommit.cpu, overcommit.memory)
        self.quotas = QuotaTree(self.profile.queues)
        self.ledger = Ledger()
        self.jobs: dict[str, JobRecord] = {}
        #: grows whenever capacity may have grown (release, node added, device healthy)
        self.capacity_epoch = 0
        #: the one job allowed to hold part of its gang (so gangs never deadlock)
        self.holder: str | None = None
        #: victim id -> the jobs that wait for it to stop, in the order they chose it, while
        #: the victim is stopping: a victim that started again before its last run stopped
        #: may be chosen again, and every preemptor waits for it
        self._nominations: dict[str, list[str]] = {}
        #: jobs not in a terminal state, in arrival order
        self._live: dict[str, JobRecord] = {}
        #: the live elastic jobs, in arrival order (the grow pass looks at no other)
        self.elastic: dict[str, JobRecord] = {}
        #: the live jobs counted by queue and state, as they move (never by a scan)
        self.tally = Tally()
        #: maximum runtime and maximum pending time, due first
        self.deadlines = Deadlines()
        #: jobs that preempted others and have not started yet, by id
        self.promised: dict[str, JobRecord] = {}
        self._seq = 0
        #: the time of the last ``handle`` call
        self.now = 0.0
        #: the actions of the ``handle`` call in progress, in the order they are taken
        self._out: list[Action] = []
        #: rate limits on migrations (defragmentation, upgrades)
        self.moves = MoveBook()
        #: the profile's throughput table (``speeds``), which the driver reads and hands
        #: over: the core opens no file
        self.speed_table: SpeedTable | None = None
        #: the units fair shares and quotas count device time in (``fairness``)
        self.units = Units(self.profile.fairness)
        #: keep the records of jobs that ended, so ``record``, ``why`` and the history
        #: answer for them. A driver that never asks about ended jobs (the simulator)
        #: turns it off, and the book then holds only jobs that live or still hold
        #: something: a record is dropped once its job has ended and released all it held.
        #: Off, an ended job's id is no longer known: the driver must not reuse ids.
        self.keep_ended = True
        #: held jobs (dependencies) and arrays (scheduler/workflow.py)
        self.workflow = Workflows()

    def emit(self, action: Action) -> None:
        """Add an action to the answer of the ``handle`` call in progress."""
        self._out.append(action)

    # -- queries -------------------------------------------------------------------------

    def record(self, job_id: str) -> JobRecord:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise KeyError(f"unknown job {job_id!r}") from None

    @property
    def nominations(self) -> Mapping[str, list[str]]:
        """Job stopping (preempted or moving) -> the jobs that wait for it."""
        return self._nominations

    @property
    def promising(self) -> bool:
        """Some job preempted others and has not started yet (capacity is kept for it)."""
        return bool(self.promised)

    def promise(self, record: JobRecord, promised: bool) -> None:
        """Mark that capacity is kept for ``record`` (it preempted jobs), or no longer."""
        record.promised = promised
        if promised:
            self.promised[record.id] = record
        else:
            self.promised.pop(record.id, None)

    def active_jobs(self) -> list[JobRecord]:
        """Jobs not in a terminal state (pending or running), in arrival order."""
        return list(self._live.values())

    def holding_jobs(self) -> list[JobRecord]:
        """Jobs that hold resources (running tasks, tasks being stopped, a gang hold), in
        arrival order: the ledger's jobs, so a long queue of waiting jobs costs nothing
        to whoever looks for victims or for what will finish."""
        return sorted((self.jobs[j] for j in self.ledger.by_job), key=lambda r: r.seq)

    # -- allocation, kept in step with the usage ledger ----------------------------------

    def allocate(self, key: TaskKey, placement: Placement, job: Job) -> None:
        self.state.allocate(key, placement)
        self.ledger.charge(key, job, self.usage_of(job, placement))

    def usage_of(self, job: Job, placement: Placement) -> Usage:
        """What ``placement`` of a task of ``job`` is charged, in the profile's units."""
        return placement_usage(self.state, placement, self.units.scale(job, self.speed_table))

    def request_of(self, job: Job, tasks: int) -> Usage:
        """What ``tasks`` tasks of ``job`` are charged at least, before placement."""
        return request_usage(job, tasks, self.units.floor(job, self.speed_table, self.state))

    def unallocate(self, key: AllocKey) -> None:
        """Undo an allocation made during the same attempt (capacity did not grow)."""
        self.state.release(key)
        self.ledger.refund(key)

    def release(self, key: AllocKey) -> None:
        self.unallocate(key)
        self.capacity_epoch += 1

    # -- transitions, each told to the driver -----------------------------------------

    def _move(
        self,
        record: JobRecord,
        target: JobState,
        now: float,
        cause: str,
        change: Change,
    ) -> None:
        """Change a job's state through the transition table and tell the driver. The
        transition's ``since`` is when the job entered its current state: its queueing
        time while pending, the start of its run while running."""
        source = record.state
        if source is JobState.PENDING:
            since = record.queued_since
        elif source is JobState.RUNNING and record.started is not None:
            since = record.started
        else:
            since = now
        record.move(target, now, cause)
        if source is not None and record.id in self._live:
            self.tally.moved(record, source, target)
        if self.workflow.active or record.job.array_of is not None:
            self.workflow.moved(record, source, target)
        self._out.append(
            JobTransition(
                record.id,
                now,
                source,
                target,
                change,
                cause,
                record.run,
                record.restarts,
                since,
                record.width,
            )
        )

    def _end(self, record: JobRecord, state: JobState, now: float, cause: str) -> None:
        """Move a job to a terminal state; it leaves the scans of cycles and timers."""
        self._drop_move(record)
        self._move(record, state, now, cause, _ENDS[state])
        record.ended = now
        self._live.pop(record.id, None)
        self.elastic.pop(record.id, None)
        self.state.best_effort_jobs.discard(record.id)
        self.queue.remove(record)
        self._forget_ended(record)

    def _forget_ended(self, record: JobRecord) -> None:
        """Drop an ended job's record once it holds nothing (see ``keep_ended``)."""
        if (
            not self.keep_ended
            and record.state in TERMINAL
            and not record.stopping
            and record.id not in self.ledger.by_job
            and self.jobs.get(record.id) is record
        ):
            del self.jobs[record.id]

    def _stop_all(self, record: JobRecord, reason: str) -> None:
        """Ask the driver to stop every running task of the current run; the allocations
        stay held, as ``stopping``, until TaskStopped arrives."""
        for task in sorted(record.placements):
            key = TaskKey(record.id, task, record.run)
            record.stopping[key] = record.placements.pop(task)
            self.emit(Kill(record.id, task, record.run, reason))

    def _stopped(self, key: TaskKey) -> None:
        record = self.jobs.get(key.job)
        if record is not None and record.stopping.pop(key, None) is not None:
            # a resized job's kept task carried its allocation to the next run already
            if key in self.state.allocations:
                self.release(key)
            self._settle(record)

    def _settle(self, victim: JobRecord) -> None:
        """A victim with nothing left to stop no longer delays its preemptor (or the job
        its migration makes room for); a migrating job starts where it moves to; a
        checkpointable job waiting for its run to stop may start again."""
        if victim.stopping:
            return
        for waiting in self._nominations.pop(victim.id, ()):
            # a preemptor that ended may be forgotten already (see ``keep_ended``)
            preemptor = self.jobs.get(waiting)
            if preemptor is not None:
                preemptor.nominated.discard(victim.id)
                self.queue.touch(preemptor)
        self._forget_ended(victim)
        if victim.moving and victim.state is JobState.RUNNING:
            self._arrive(victim, self.now)
        elif victim.state is JobState.PENDING:
            self.queue.touch(victim)

    def _drop_hold(self, record: JobRecord) -> None:
        for task in sorted(record.held):
            self.release(TaskKey(record.id, task, record.run + 1))
        record.held.clear()
        record.hold_since = None
        if self.holder == record.id:
            self.holder = None

    def _end_pending(self, record: JobRecord) -> None:
        """A pending job leaves the queue for good: give back what it holds or was promised."""
        self._drop_hold(record)
        self.promise(record, False)

    def _requeue(self, record: JobRecord, now: float, cause: str, change: Change) -> None:
        self._move(record, JobState.PENDING, now, cause, change)
        record.finished.clear()
        record.started = None
        record.borrowing = False
        record.queued_since = now
        record.count = record.job.replicas  # an elastic job is tried at its most again
        self.queue.add(record)
        self.deadlines.queued(record, self.profile.timeouts.max_pending_s)
        self.tally.queued(record)
        # until the next attempt says more; the job may wait out this call untried
        record.explanation = Explanation(Code.UNSCHEDULABLE, f"back in the queue: {cause}")

    def _max_runtime(self, job: Job) -> float | None:
        if job.max_runtime_s is not None:
            return job.max_runtime_s
        return self.profile.timeouts.max_runtime_s

    # -- called by the cycle -------------------------------------------------------------

    def preempt(
        self,
        victim: JobRecord,
        preemptor: JobRecord,
        kind: PreemptionKind,
        grace_s: float,
        now: float,
    ) -> None:
        """Stop the victim's run within ``grace_s`` (its allocations stay held until each
        TaskStopped) and requeue it; the preemptor waits for it."""
        reason = f"preempted by {preemptor.id} ({kind}); it {loss_note(victim, now)}"
        keep_all(victim, now)
        run = victim.run
        tasks = tuple(sorted(victim.placements))
        for task in tasks:
            victim.stopping[TaskKey(victim.id, task, run)] = victim.placements.pop(task)
        victim.preemptions += 1
        victim.preempted_by.add(preemptor.id)
        preemptor.preempted_jobs.add(victim.id)
        preemptor.nominated.add(victim.id)
        self._nominations.setdefault(victim.id, []).append(preemptor.id)
        notice = victim.job.notice_s
        self.emit(Preempt(victim.id, run, tasks, grace_s, reason, preemptor.id, kind, notice))
        self._requeue(victim, now, reason, Change.PREEMPTED)
        self._settle(victim)

    def yield_round(self, record: JobRecord, grace_s: float, reason: str, now: float) -> None:
        """Stop a running job whose devices the round policy gives to others next round:
        as :meth:`preempt`, with a notice for a checkpointable job, but for no one job (no
        nomination: the round's choices are placed once its devices are free)."""
        keep_all(record, now)
        run = record.run
        tasks = tuple(sorted(record.placements))
        for task in tasks:
            record.stopping[TaskKey(record.id, task, run)] = record.placements.pop(task)
        record.preemptions += 1
        text = f"{reason}; it {loss_note(record, now)}"
        notice = record.job.notice_s
        self.emit(Preempt(record.id, run, tasks, grace_s, text, "", PreemptionKind.ROUND, notice))
        self._requeue(record, now, text, Change.PREEMPTED)
        self._settle(record)

    def started(self, record: JobRecord) -> None:
        """After :meth:`bind`: the job leaves the queue unless tasks are left to place, and
        a run that started now gets its maximum runtime."""
        if record.state is JobState.RUNNING and record.has_unplaced:
            self.queue.add(record)
        else:
            self.queue.remove(record)
        if record.started == self.now:
            self.deadlines.run_started(record, self._max_runtime(record.job))

    def bind(self, record: JobRecord, placed: list[tuple[int, Placement]], now: float) -> None:
        """Commit an attempt whose placements are allocated (and whose Bind plugins ran)
        already: a new run starts, or a running job whose gang minimum was below its
        replicas starts more tasks."""
        for task, placement in placed:
            record.placements[task] = placement
        record.held.clear()
        record.hold_since = None
        if self.holder == record.id:
            self.holder = None
        self.promise(record, False)
        record.explanation = None
        record.blocked_by = BlockedBy.NONE
        if record.state is not JobState.RUNNING:
            record.run += 1
            record.started = now
            if record.job.elastic:  # partial admission: the count that fitted
                record.count = len(placed)
                record.counts.append((now, record.count))
            record.borrowing = self.quotas.enabled and self._borrowing(record)
            if len(placed) == 1:
                nodes = placed[0][1].node
            else:
                nodes = ", ".join(sorted({p.node for _, p in placed}))
            cause = f"run {record.run}: bound {len(placed)} task(s) to {nodes}" + (
                " (borrowing quota)" if record.borrowing else ""
            )
            self._move(record, JobState.RUNNING, now, cause, Change.STARTED)
        self.emit(Bind(record.id, record.run, tuple(placed), record.checkpoint, record.width))

    def _borrowing(self, record: JobRecord) -> bool:
        """Whether the run starting now is admitted above a guarantee on its queue's path."""
        usage: Mapping[str, int] = self.ledger.by_job.get(record.id, {})
        flavors = {f for f, a in usage.items() if a > 0}
        return self.quotas.borrowing(record.job.queue, self.ledger, flavors)

    # -- migration -----------------------------------------------------------------------

    def migrate(
        self,
        record: JobRecord,
        placements: list[tuple[int, Placement]],
        kind: MigrationKind,
        for_job: JobRecord | None,
        grace_s: float,
        now: float,
    ) -> None:
        """Move a running job to ``placements`` (each must fit the live state: they are
        allocated to its next run now, so nothing else takes them). Its tasks get their
        notice and are stopped; when the last has stopped the next run starts there
        (:meth:`_arrive`). ``for_job`` waits for the move, as a preemptor for its victims.
        Raises AllocationError, changing nothing, if a placement does not fit."""
        taken: list[TaskKey] = []
        try:
            for task, placement in placements:
                key = TaskKey(record.id, task, record.run + 1)
                self.allocate(key, placement, record.job)
                taken.append(key)
        except AllocationError:
            for key in reversed(taken):
                self.unallocate(key)
            raise
        record.moving = dict(placements)
        record.migrations += 1
        record.moved_at = now
        nodes = ", ".join(sorted({p.node for _, p in placements}))
        why = f" to make room for {for_job.id}" if for_job is not None else ""
        reason = f"migrating to {nodes} ({kind}{why}); it {loss_note(record, now)}"
        keep_all(record, now)
        run = record.run
        tasks = tuple(sorted(record.placements))
        for task in tasks:
            record.stopping[TaskKey(record.id, task, run)] = record.placements.pop(task)
        if for_job is not None:
            for_job.nominated.add(record.id)
            self._nominations.setdefault(record.id, []).append(for_job.id)
        self._move(record, JobState.RUNNING, now, reason, Change.MIGRATING)
        target = for_job.id if for_job is not None else ""
        notice = record.job.notice_s
        self.emit(
            Migrate(record.id, run, tasks, tuple(placements), notice, grace_s, reason, kind, target)
        )
        self._settle(record)

    def _arrive(self, record: JobRecord, now: float) -> None:
        """A migrating job's old tasks have all stopped: its next run starts where it moved."""
        placed = sorted(record.moving.items())
        record.moving = {}
        record.run += 1
        record.started = now
        record.placements = dict(placed)
        record.finished.clear()
        nodes = ", ".join(sorted({p.node for _, p in placed}))
        change = Change.MIGRATED
        if record.resized_from is not None:
            cause = f"run {record.run}: resized from {record.resized_from} to {len(placed)} tasks"
            change, record.resized_from = Change.RESIZED, None
            record.counts.append((now, len(placed)))
        else:
            cause = f"run {record.run}: moved to {nodes}"
        if record.checkpoint is not None:
            cause += f", resuming from its checkpoint of {record.checkpoint.describe()}"
        record.count = len(placed) if record.job.elastic else record.count
        self._move(record, JobState.RUNNING, now, cause, change)
        self.deadlines.run_started(record, self._max_runtime(record.job))
        self.emit(Bind(record.id, record.run, tuple(placed), record.checkpoint, record.width))

    def _drop_move(self, record: JobRecord) -> None:
        """Give back a migration's destination (the job ends, or it went away)."""
        for task in sorted(record.moving):
            key = TaskKey(record.id, task, record.run + 1)
            if key in self.state.allocations:
                self.release(key)
        record.moving = {}
