"""Actions: what the core asks drivers to carry out. Plain frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.cluster.placement import Placement
from hetsched.scheduler.explain import Explanation

__all__ = ["Action", "Bind", "Kill", "Pending", "Preempt", "Reject"]


@dataclass(frozen=True, slots=True)
class Bind:
    """Start these tasks of the job on these placements (already allocated in the core)."""

    job_id: str
    placements: tuple[tuple[int, Placement], ...]


@dataclass(frozen=True, slots=True)
class Kill:
    """Stop a running task; the core has already released its allocation."""

    job_id: str
    task: int
    reason: str


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop a job's tasks within ``grace_s`` seconds to make room; it goes back to the queue."""

    job_id: str
    grace_s: float
    reason: str


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
