"""Actions: what the core asks drivers to carry out. Plain frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.cluster.placement import Placement
from hetsched.scheduler.explain import Explanation

__all__ = ["Action", "Bind", "Kill", "Pending", "Preempt", "Reject"]


@dataclass(frozen=True, slots=True)
class Bind:
    """Start these tasks of the job on these placements (already allocated in the core).

    ``run`` numbers the job's runs (it grows each time the job starts again after a requeue);
    the driver echoes it in TaskFinished and TaskStopped.
    """

    job_id: str
    run: int
    placements: tuple[tuple[int, Placement], ...]


@dataclass(frozen=True, slots=True)
class Kill:
    """Stop a task of run ``run`` now (SIGTERM, then SIGKILL), then report TaskStopped.

    The allocation stays held until TaskStopped arrives, except when the task's node or
    device is already gone (then it was released at once and no report is needed).
    """

    job_id: str
    task: int
    run: int
    reason: str


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop every task of the job's run ``run`` within ``grace_s`` seconds and report each
    with TaskStopped; the job is already back in the queue.

    ``preemptor`` is the job it makes room for and ``kind`` is ``priority`` or ``reclaim``
    (quota reclaim); the allocations stay held until each TaskStopped arrives.
    """

    job_id: str
    run: int
    grace_s: float
    reason: str
    preemptor: str = ""
    kind: str = ""


@dataclass(frozen=True, slots=True)
class Reject:
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Pending:
    """The job waits; emitted when it starts waiting and whenever its explanation changes."""

    job_id: str
    explanation: Explanation


Action = Bind | Kill | Preempt | Reject | Pending
