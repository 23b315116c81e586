"""Job states and the table of allowed transitions.

A job changes state only through :func:`check_transition`; every change is kept as a
:class:`Transition` with its cause, so the whole story of a job can be told.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "TERMINAL",
    "TRANSITIONS",
    "InvalidTransition",
    "JobState",
    "Transition",
    "check_transition",
]


class JobState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED})

#: (from, to) pairs that may happen; ``None`` is "not yet submitted".
TRANSITIONS: frozenset[tuple[JobState | None, JobState]] = frozenset(
    {
        (None, JobState.PENDING),
        (None, JobState.REJECTED),  # invalid or unplaceable at submit
        (JobState.PENDING, JobState.RUNNING),
        (JobState.PENDING, JobState.REJECTED),  # never fits, or waited past its limit
        (JobState.PENDING, JobState.CANCELLED),
        (JobState.RUNNING, JobState.SUCCEEDED),
        (JobState.RUNNING, JobState.FAILED),
        (JobState.RUNNING, JobState.CANCELLED),
        (JobState.RUNNING, JobState.PENDING),  # preempted, or requeued after a failure
        (JobState.RUNNING, JobState.RUNNING),  # migrated: it moves, and never waits in line
    }
)


class InvalidTransition(RuntimeError):
    """A state change that the transition table does not allow."""


@dataclass(frozen=True, slots=True)
class Transition:
    """One recorded state change: when, from what, to what, and why."""

    job_id: str
    time: float
    source: JobState | None
    target: JobState
    cause: str


def check_transition(job_id: str, source: JobState | None, target: JobState) -> None:
    if (source, target) not in TRANSITIONS:
        raise InvalidTransition(f"job {job_id}: {source} -> {target} is not allowed")
