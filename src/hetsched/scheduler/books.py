"""The core as its own parts see it: the :class:`Books` protocol.

The cycle, backfill, preemption and ``why`` work on the scheduler's books (job records,
cluster state, usage ledger, quotas) and call back into it to allocate, bind and preempt.
They are typed against this protocol, which :class:`~hetsched.scheduler.core.Scheduler`
satisfies, so none of them imports the module that runs them. Plugins outside the core
see the narrower, read-only :class:`~hetsched.framework.handle.SchedulerHandle`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocKey, ClusterState
from hetsched.cluster.usage import Ledger, Usage
from hetsched.framework.profile import ProfileSpec
from hetsched.framework.runtime import Framework
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.model.speed import SpeedTable
from hetsched.queueing.waiting import WaitingQueue
from hetsched.scheduler.actions import Action, MigrationKind, PreemptionKind
from hetsched.scheduler.quota import QuotaTree
from hetsched.scheduler.records import JobRecord, MoveBook
from hetsched.scheduler.tally import Tally
from hetsched.scheduler.workflow import Workflows

__all__ = ["Books", "RoundHold"]


class RoundHold(Protocol):
    """What the cycle asks of round mode (``hetsched.scheduler.round_mode.RoundBook``)."""

    def holds(self, sched: Books, record: JobRecord) -> bool:
        """Keep this waiting job from the ordinary cycle (it waits for a round)."""
        ...

    def explanation(self, record: JobRecord) -> str: ...


@runtime_checkable
class Books(Protocol):
    """What the core's parts read and call (see the module docstring)."""

    #: the one job allowed to hold part of its gang (the cycle sets it)
    holder: str | None

    @property
    def queue(self) -> WaitingQueue:
        """The jobs with tasks to place, indexed by why they wait."""
        ...

    @property
    def incremental(self) -> bool:
        """Cycles merge the queue's lanes (else: the reference full sort)."""
        ...

    @property
    def state(self) -> ClusterState: ...

    @property
    def tally(self) -> Tally:
        """Live jobs counted by queue and state, kept as they move."""
        ...

    @property
    def profile(self) -> ProfileSpec: ...

    @property
    def framework(self) -> Framework: ...

    @property
    def quotas(self) -> QuotaTree: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def jobs(self) -> Mapping[str, JobRecord]: ...

    @property
    def workflow(self) -> Workflows:
        """Held jobs and arrays (scheduler/workflow.py)."""
        ...

    @property
    def promised(self) -> Mapping[str, JobRecord]:
        """Jobs that preempted others and have not started yet."""
        ...

    @property
    def promising(self) -> bool: ...

    @property
    def capacity_epoch(self) -> int:
        """Grows whenever capacity may have grown."""
        ...

    @property
    def strict(self) -> bool:
        """The queue sort is strict: a job that cannot start blocks its queue."""
        ...

    @property
    def now(self) -> float: ...

    @property
    def nominations(self) -> Mapping[str, list[str]]:
        """Job stopping (preempted or moving) -> the jobs that wait for it."""
        ...

    @property
    def moves(self) -> MoveBook:
        """Rate limits on migrations."""
        ...

    @property
    def speed_table(self) -> SpeedTable | None:
        """The profile's throughput table, handed to the core by its driver."""
        ...

    @property
    def rounds(self) -> RoundHold | None:
        """The round state when the profile has a ``rounds`` section."""
        ...

    def usage_of(self, job: Job, placement: Placement) -> Usage:
        """What a task's placement is charged, in the profile's fairness units."""
        ...

    def request_of(self, job: Job, tasks: int) -> Usage:
        """What ``tasks`` tasks are charged at least before placement."""
        ...

    def record(self, job_id: str) -> JobRecord: ...

    def queue_weight(self, queue: str) -> float: ...

    def active_jobs(self) -> list[JobRecord]: ...

    def holding_jobs(self) -> list[JobRecord]:
        """Jobs that hold resources (running, stopping, a gang hold), in arrival order."""
        ...

    def waiting(self) -> list[JobRecord]: ...

    def position(self, job_id: str) -> tuple[str, int] | None: ...

    def emit(self, action: Action) -> None: ...

    def allocate(self, key: TaskKey, placement: Placement, job: Job) -> None: ...

    def unallocate(self, key: AllocKey) -> None: ...

    def promise(self, record: JobRecord, promised: bool) -> None: ...

    def bind(self, record: JobRecord, placed: list[tuple[int, Placement]], now: float) -> None: ...

    def started(self, record: JobRecord) -> None: ...

    def migrate(
        self,
        record: JobRecord,
        placements: list[tuple[int, Placement]],
        kind: MigrationKind,
        for_job: JobRecord | None,
        grace_s: float,
        now: float,
    ) -> None: ...

    def yield_round(self, record: JobRecord, grace_s: float, reason: str, now: float) -> None: ...
    @property
    def elastic(self) -> Mapping[str, JobRecord]:
        """The live elastic jobs, in arrival order."""
        ...

    def grow(
        self, record: JobRecord, new: dict[int, Placement], grace_s: float, now: float
    ) -> None: ...
    def shrink(
        self, record: JobRecord, count: int, for_job: JobRecord, grace_s: float, now: float
    ) -> None: ...

    def preempt(
        self,
        victim: JobRecord,
        preemptor: JobRecord,
        kind: PreemptionKind,
        grace_s: float,
        now: float,
    ) -> None: ...
