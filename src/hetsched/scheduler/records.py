"""The core's books: one record per job, changed only through the transition table, and
the book of moves (migration rate limits)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from hetsched.cluster.placement import Placement
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.job import Job
from hetsched.model.lifecycle import TERMINAL, JobState, Transition, check_transition
from hetsched.scheduler.explain import Explanation

__all__ = ["BlockedBy", "JobRecord", "MoveBook"]


class BlockedBy(enum.StrEnum):
    """Why a job's last attempt failed."""

    #: not tried, or it started
    NONE = ""
    #: no room on the nodes now (freed capacity may help)
    CAPACITY = "capacity"
    #: a queue's quota on its path
    QUOTA = "quota"
    #: it holds part of its gang, or waits for the one gang hold
    GANG = "gang"
    #: it would delay the backfill head's reservation or a preemptor's promised capacity
    RESERVATION = "reservation"
    #: no node could ever hold it as the cluster is (a topology change may help)
    UNRESOLVABLE = "unresolvable"
    #: a plugin raised during its attempt (tried again once the cluster changes)
    ERROR = "error"


@dataclass(slots=True, eq=False)
class JobRecord:
    """Mutable scheduling state of one job. Times are on the driver's clock, in seconds."""

    job: Job
    #: arrival order, for stable ordering of equal keys
    seq: int
    state: JobState | None = None
    #: the current run: 0 before the first start, then 1, 2, ... per start
    run: int = 0
    #: task index -> placement, for tasks of the current run that are running
    placements: dict[int, Placement] = field(default_factory=dict)
    #: allocation key -> placement, for tasks asked to stop whose TaskStopped is awaited
    stopping: dict[TaskKey, Placement] = field(default_factory=dict)
    #: tasks that finished successfully in the current run
    finished: set[int] = field(default_factory=set)
    history: list[Transition] = field(default_factory=list)
    explanation: Explanation | None = None
    #: with preemption enabled, when a job that failed is tried again even if no room
    #: appeared: victims become eligible with time (minimum runtime) and new binds
    retry_at: float = 0.0
    #: when the job entered the queue this time (submission or requeue)
    queued_since: float = 0.0
    #: when its current run started
    started: float | None = None
    ended: float | None = None
    restarts: int = 0
    #: the current run was admitted with some queue on its path above its guarantee
    borrowing: bool = False
    #: the last checkpoint a task reported (TaskCheckpointed), of this run or an earlier
    #: one: what the next run resumes from (each Bind carries it). Kept when the job is
    #: preempted, migrated or restarted, and when a device failure requeues it under the
    #: policy ``checkpoint``; dropped when the policy is ``requeue`` (from scratch)
    checkpoint: SavedCheckpoint | None = None
    #: a migration in progress: task -> placement of the *next* run, allocated until the
    #: current run's tasks (in ``stopping``) have stopped and the new run starts there
    moving: dict[int, Placement] = field(default_factory=dict)
    #: times the job was migrated, and when its last migration was decided
    migrations: int = 0
    moved_at: float | None = None
    #: a partial gang hold: task -> placement, allocated for the *next* run until the gang
    #: completes or ``gang.timeout_s`` passes
    held: dict[int, Placement] = field(default_factory=dict)
    hold_since: float | None = None
    #: not tried again before this time (after a gang timeout)
    backoff_until: float = 0.0
    gang_timeouts: int = 0
    #: why the last attempt failed
    blocked_by: BlockedBy = BlockedBy.NONE
    #: victims this job preempted that have not stopped yet
    nominated: set[str] = field(default_factory=set)
    #: it preempted jobs and has not started since: capacity is kept for it
    promised: bool = False
    #: every job this job ever preempted, and every job that ever preempted it
    preempted_jobs: set[str] = field(default_factory=set)
    preempted_by: set[str] = field(default_factory=set)
    #: times this job was preempted
    preemptions: int = 0
    #: backfill: start times reserved for it while it was the head job, in order
    reserved_starts: list[float] = field(default_factory=list)
    #: a resize through a restart in progress: the count it is resized from (``moving``
    #: holds the next run, at the new count)
    resized_from: int | None = None
    #: (time, count) each time an elastic job's count was set: a start, a grow, a shrink
    counts: list[tuple[float, int]] = field(default_factory=list)
    #: the job's id: a field, not a property, since the books read it several times per
    #: placement (the job of a record never changes)
    id: str = field(init=False, repr=False)
    #: how many tasks its current run has (while resizing: its next run); ``replicas``
    #: unless the job is elastic and runs with fewer
    count: int = field(init=False)

    def __post_init__(self) -> None:
        self.id = self.job.id
        self.count = self.job.replicas

    @property
    def width(self) -> int:
        """What a Bind says of the run's count: the count of an elastic job, else 0 (the
        job's ``replicas``)."""
        return self.count if self.job.elastic else 0

    @property
    def reserved_start(self) -> float | None:
        return self.reserved_starts[-1] if self.reserved_starts else None

    @property
    def resume_from(self) -> float | None:
        """The time of the checkpoint the next run resumes from, or None (from scratch, or
        no next run: the job ended)."""
        if self.checkpoint is None or self.state in TERMINAL:
            return None
        return self.checkpoint.time

    @property
    def waits_for_stop(self) -> bool:
        """A checkpointable job whose earlier run is still stopping: it does not start
        again before that run has saved its state and stopped."""
        return bool(self.stopping) and self.job.checkpoint is not None

    @property
    def has_unplaced(self) -> bool:
        """Some task neither holds resources nor finished (cheaper than ``unplaced``)."""
        held = len(self.placements) + len(self.moving)
        return held + len(self.finished) < self.count

    @property
    def unplaced(self) -> list[int]:
        """Tasks that neither hold resources (here, or where they move) nor finished."""
        if not (self.placements or self.moving or self.finished):
            return list(range(self.count))  # the usual case: a job not started yet
        return [
            t
            for t in range(self.count)
            if t not in self.placements and t not in self.moving and t not in self.finished
        ]

    def move(self, target: JobState, now: float, cause: str) -> None:
        """Change state through the transition table, recording the cause."""
        check_transition(self.id, self.state, target)
        self.history.append(Transition(self.id, now, self.state, target, cause))
        self.state = target

    def story(self) -> list[str]:
        return [f"{t.time:.3f} {t.source or 'new'} -> {t.target}: {t.cause}" for t in self.history]


@dataclass(slots=True)
class MoveBook:
    """The core's rate limits on moves."""

    #: when the last defragmentation plan that moved jobs was made
    planned_at: float | None = None
    #: job -> when a plan for it last failed (it is not tried again within the interval)
    failed: dict[str, float] = field(default_factory=dict)
    #: the time of the cycle the count below is for, and jobs moved in it
    cycle_at: float | None = None
    moved: int = 0
    #: capacity epoch of the last upgrade pass, and of the last consolidation pass
    upgrade_epoch: int = -1
    consolidate_epoch: int = -1

    def fail(self, job_id: str, now: float, interval: float) -> None:
        """A plan for ``job_id`` failed at ``now``; entries past the interval are dropped
        as the book grows."""
        self.failed[job_id] = now
        if len(self.failed) > 1024:
            self.failed = {j: t for j, t in self.failed.items() if now - t < interval}

    def count(self, now: float) -> int:
        if self.cycle_at != now:
            self.cycle_at, self.moved = now, 0
        return self.moved
