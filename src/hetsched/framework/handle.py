"""What plugins may read of the scheduler: the :class:`SchedulerHandle` protocol.

A plugin gets a handle when it is built (``cls(args, handle)``; None when a Framework runs
without a core). The handle is for reading: the cluster as it is, the usage ledger, queue
weights, the jobs in the core, the throughput table job types resolve in. Nothing here
changes the core's books; the one call that asks for something,
:meth:`SchedulerHandle.track_usage`, subscribes to a decayed usage integral the core keeps
up to date.

The types here are protocols so that this module depends on nothing above the framework:
the core's job records and ledger satisfy them structurally.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from hetsched.cluster.state import ClusterState
from hetsched.model.job import Job
from hetsched.model.speed import SpeedTable

__all__ = ["DecayedView", "QueuedJob", "SchedulerHandle", "UsageView"]


class QueuedJob(Protocol):
    """A job in the core as a queue sort sees it."""

    @property
    def job(self) -> Job: ...

    @property
    def seq(self) -> int:
        """Arrival order: a stable tie-break."""
        ...

    @property
    def queued_since(self) -> float:
        """When it last entered the queue (submission or requeue)."""
        ...


class UsageView(Protocol):
    """What running and stopping tasks hold now, per user, leaf queue and job: resource
    (``cpu`` in millicores, ``memory`` in MiB, a device flavor in milli-units) -> amount."""

    @property
    def by_user(self) -> Mapping[str, Mapping[str, int]]: ...

    @property
    def by_queue(self) -> Mapping[str, Mapping[str, int]]: ...

    @property
    def by_job(self) -> Mapping[str, Mapping[str, int]]: ...

    def stamp(self, by: str, name: str) -> int:
        """Changes whenever the usage of user (``by="user"``) or queue ``name`` changes:
        what a reader caches a value derived from one entity's usage under."""
        ...


class DecayedView(Protocol):
    """A decayed usage integral (dominant-share seconds) per user or queue."""

    @property
    def value(self) -> Mapping[str, float]: ...


class SchedulerHandle(Protocol):
    """The scheduler as a plugin may see it (see the module docstring)."""

    @property
    def now(self) -> float:
        """The time of the ``handle`` call in progress (or the last one)."""
        ...

    @property
    def cluster(self) -> ClusterState:
        """The live cluster state: read it, never change it (fork it for a what-if)."""
        ...

    @property
    def usage(self) -> UsageView: ...

    @property
    def speed_table(self) -> SpeedTable | None:
        """The throughput table that a job's ``job_type`` resolves in (the profile's
        ``speeds``, plus what the driver learned), or None: handed to the core by its
        driver, which may replace it between two ``handle`` calls, so read it per use."""
        ...

    def queue_weight(self, queue: str) -> float:
        """The queue's fair-share weight in the profile's queue tree (1 without one)."""
        ...

    def track_usage(self, by: str, half_life_s: float) -> DecayedView:
        """Keep a decayed usage integral per ``user`` or ``queue`` from now on."""
        ...

    def job(self, job_id: str) -> QueuedJob | None:
        """A job the core knows, or None."""
        ...
