"""What a waiting job needs to start, read by the waiting queue and the cycle alike: how
many tasks it must place at once, its *shape* (jobs of one shape place alike), and whether
moving or stopping running jobs (preemption, defragmentation) may give it room without any
capacity being freed, so it is tried again on a timer rather than parked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from hetsched.cluster.state import ClusterState
from hetsched.framework.runtime import Framework
from hetsched.model.lifecycle import JobState
from hetsched.queueing.lanes import Shape

if TYPE_CHECKING:
    from hetsched.scheduler.records import JobRecord

__all__ = [
    "PREEMPTION_RETRY_S",
    "QueueOwner",
    "moves_may_help",
    "needed",
    "preemption_may_help",
    "shape_of",
]


class QueueOwner(Protocol):
    """What the queue reads of the scheduler that owns it."""

    @property
    def framework(self) -> Framework: ...

    @property
    def state(self) -> ClusterState: ...

    @property
    def jobs(self) -> Mapping[str, JobRecord]: ...

    @property
    def capacity_epoch(self) -> int: ...

    @property
    def now(self) -> float: ...


#: how often (driver seconds) a waiting job that preemption might help is tried again when
#: no room appeared for it: victims become eligible as they pass their minimum runtime, and
#: lower-priority jobs that started since are new candidates
PREEMPTION_RETRY_S = 1.0


def needed(record: JobRecord) -> int:
    """Tasks the job must place at once: its gang minimum (or what is left of it); one
    more task at a time for a running job."""
    if record.state is JobState.RUNNING:
        return 1
    if record.placements or record.moving or record.finished:
        return min(record.job.gang_min, len(record.unplaced))
    return record.job.gang_min  # every task unplaced: gang_min <= replicas


def shape_of(record: JobRecord) -> Shape:
    """Jobs of one shape place alike: filters and scores read the request and whether the
    job is best effort, nothing else of the job (but where in the network it goes)."""
    job = record.job
    request = job.resources if job.topology is None else (job.resources, job.topology)
    return (request, job.best_effort, needed(record))


def moves_may_help(sched: QueueOwner) -> bool:
    """Preemption or defragmentation is enabled: moving or stopping running jobs may give
    a waiting job room without any capacity being freed."""
    framework = sched.framework
    return bool(framework.post_filters) or framework.spec.migration.defrag.enabled


def preemption_may_help(sched: QueueOwner, record: JobRecord, now: float) -> bool:
    """Whether the job is due for another try because preemption (or defragmentation) is
    enabled: a failure for room, quota or a gang can turn into a preemption without any
    capacity being freed."""
    return (
        record.state is JobState.PENDING
        and record.blocked_by in ("capacity", "quota", "gang")
        and now >= record.retry_at
        and moves_may_help(sched)
    )
