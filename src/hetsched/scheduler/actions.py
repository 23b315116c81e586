"""Actions: what the core asks drivers to carry out, and what it tells them happened.

Plain frozen dataclasses. They say everything a driver needs: a driver never reads the
core's books to learn which tasks to stop, whether a job was requeued, how many times it
restarted or which run it is in. ``hetsched.drivers.interpreter`` carries them out the
same way for every driver.

Within one ``handle`` call the actions come in the order the core took its decisions; a
job's :class:`JobTransition` actions come in the order of its history.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from hetsched.cluster.placement import Placement
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.lifecycle import JobState
from hetsched.scheduler.explain import Explanation

__all__ = [
    "Action",
    "Bind",
    "Change",
    "JobTransition",
    "Kill",
    "Migrate",
    "MigrationKind",
    "Pending",
    "Preempt",
    "PreemptionKind",
    "Reject",
]


class PreemptionKind(enum.StrEnum):
    """Why a victim is preempted: for a job of higher priority in its queue, to give a
    queue back its guarantee (quota reclaim), or because the round policy gives its devices
    to others for the next round (round)."""

    PRIORITY = "priority"
    RECLAIM = "reclaim"
    ROUND = "round"


class Change(enum.StrEnum):
    """What a :class:`JobTransition` records, beyond its source and target states."""

    #: accepted into the queue (None -> pending)
    SUBMITTED = "submitted"
    #: a new run started (pending -> running)
    STARTED = "started"
    #: every task succeeded
    SUCCEEDED = "succeeded"
    #: a task failed past its restarts, the job ran past its maximum runtime, or a lost
    #: device failed it by its policy
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: at submission (unknown queue, past a hard limit) or after the maximum pending time
    REJECTED = "rejected"
    #: running -> pending: stopped to make room for another job
    PREEMPTED = "preempted"
    #: running -> pending: a task failed and the restart policy runs the job again
    RESTARTED = "restarted"
    #: running -> pending: a node or device it ran on went away
    LOST = "lost"
    #: running -> pending: the driver could not start the run (StartFailed)
    START_FAILED = "start_failed"
    #: pending -> pending: a partial gang hold timed out and was released (a backoff follows)
    GANG_TIMEOUT = "gang_timeout"
    #: pending -> pending: the jobs it waited for ended as it needs; it enters the queue
    RELEASED = "released"
    #: running -> running: its tasks are being stopped to move elsewhere (a Migrate)
    MIGRATING = "migrating"
    #: running -> running: its new run started where it moved to (a Bind follows)
    MIGRATED = "migrated"
    #: running -> running: an elastic job's tasks are being stopped to start again at a
    #: new count (a Migrate of kind ``resize``), or it changed its count live
    RESIZING = "resizing"
    #: running -> running: its run at the new count started (a Bind follows)
    RESIZED = "resized"


class MigrationKind(enum.StrEnum):
    """Why a job is moved: to make room for a job that fits nowhere as the cluster is
    packed (defragmentation), to a faster device model (upgrade), to the device model the
    round policy gives it for the next round (round), or into one network domain of the
    level it prefers (consolidation)."""

    DEFRAG = "defragmentation"
    UPGRADE = "upgrade"
    ROUND = "round"
    #: an elastic job starts again at a new count (grown on idle capacity, or shrunk to
    #: make room); its kept tasks' placements carry over to the next run
    RESIZE = "resize"
    CONSOLIDATE = "consolidation"


@dataclass(frozen=True, slots=True)
class Bind:
    """Start these tasks of the job on these placements (already allocated in the core).

    ``run`` numbers the job's runs (it grows each time the job starts again after a requeue);
    the driver echoes it in TaskFinished and TaskStopped. ``resume`` is the checkpoint the
    run resumes from (its tasks are told where it is), or None: it starts from scratch.
    ``replicas`` is how many tasks the run has (an elastic job's count; 0: the job's
    ``replicas``); each task is told it with its rank (its task index).
    """

    job_id: str
    run: int
    placements: tuple[tuple[int, Placement], ...]
    resume: SavedCheckpoint | None = None
    replicas: int = 0


@dataclass(frozen=True, slots=True)
class Kill:
    """Stop a task of run ``run`` now (SIGTERM, then SIGKILL), then report TaskStopped.

    The allocation stays held until TaskStopped arrives, except when ``released``: the
    task's node or device is already gone, so the core freed the allocation at once and
    awaits no report (one is harmless).
    """

    job_id: str
    task: int
    run: int
    reason: str
    released: bool = False


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop ``tasks`` of the job's run ``run``: tell each ``notice_s`` seconds ahead (a
    chance to checkpoint), then stop it within ``grace_s``, and report each with
    TaskStopped. The job is already back in the queue (a JobTransition says so).

    ``preemptor`` is the job it makes room for; the allocations stay held until each
    TaskStopped arrives.
    """

    job_id: str
    run: int
    tasks: tuple[int, ...]
    grace_s: float
    reason: str
    preemptor: str = ""
    kind: PreemptionKind = PreemptionKind.PRIORITY
    notice_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Migrate:
    """Move the running job: stop ``tasks`` of run ``run`` as a Preempt does (a notice of
    ``notice_s`` to checkpoint, then within ``grace_s``), reporting each with TaskStopped.
    Once every one has stopped, the core starts run ``run + 1`` on ``placements`` (already
    allocated to it, so nothing else takes them) with a Bind that resumes from the job's
    last checkpoint. The job stays running: it never goes back to the queue, so it never
    loses its place. ``for_job`` is the job it makes room for (defragmentation).
    """

    job_id: str
    run: int
    tasks: tuple[int, ...]
    placements: tuple[tuple[int, Placement], ...]
    notice_s: float
    grace_s: float
    reason: str
    kind: MigrationKind = MigrationKind.DEFRAG
    for_job: str = ""


@dataclass(frozen=True, slots=True)
class Reject:
    """The job is refused: at submission, or after waiting past the maximum pending time.
    A duplicate job id is refused with a Reject alone (the job already known is unchanged);
    otherwise a JobTransition to ``rejected`` comes with it."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Pending:
    """The job waits; emitted when it starts waiting and whenever its explanation changes."""

    job_id: str
    explanation: Explanation


class JobTransition(NamedTuple):
    """The job changed state (or, for a gang timeout, stayed pending with a new story).

    One per entry of the job's history, in order: what a driver stores or reports about a
    job comes from these. ``run`` is the job's run after the change (the new run for
    ``started``; 0 before its first start); ``restarts`` counts the restarts its restart
    policy made so far; ``since`` is when the job entered ``source`` (its queueing time
    for a start, its run's start for the end of a run); ``replicas``, for an elastic job,
    how many tasks its run has after the change.

    A named tuple rather than a frozen dataclass like the other actions: one is emitted
    for every change of every job, and a tuple is about four times cheaper to build.
    """

    job_id: str
    time: float
    source: JobState | None
    target: JobState
    change: Change
    cause: str
    run: int
    restarts: int
    since: float
    #: an elastic job's count after the change (its run's tasks); 0 for other jobs
    replicas: int = 0


Action = Bind | Kill | Preempt | Migrate | Reject | Pending | JobTransition
