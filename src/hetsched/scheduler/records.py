"""The core's book of jobs: one record per job, changed only through the transition table."""

from __future__ import annotations

from dataclasses import dataclass, field

from hetsched.cluster.placement import Placement
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState, Transition, check_transition
from hetsched.scheduler.explain import Explanation

__all__ = ["JobRecord"]


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
    stopping: dict[str, Placement] = field(default_factory=dict)
    #: tasks that finished successfully in the current run
    finished: set[int] = field(default_factory=set)
    history: list[Transition] = field(default_factory=list)
    explanation: Explanation | None = None
    #: the capacity epoch of the last failed attempt: no retry until capacity grows
    failed_epoch: int = -1
    #: when the job entered the queue this time (submission or requeue)
    queued_since: float = 0.0
    #: when its current run started
    started: float | None = None
    ended: float | None = None
    restarts: int = 0

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def unplaced(self) -> list[int]:
        """Tasks that neither hold resources nor finished."""
        return [
            t
            for t in range(self.job.replicas)
            if t not in self.placements and t not in self.finished
        ]

    def move(self, target: JobState, now: float, cause: str) -> None:
        """Change state through the transition table, recording the cause."""
        check_transition(self.id, self.state, target)
        self.history.append(Transition(self.id, now, self.state, target, cause))
        self.state = target

    def story(self) -> list[str]:
        return [f"{t.time:.3f} {t.source or 'new'} -> {t.target}: {t.cause}" for t in self.history]
