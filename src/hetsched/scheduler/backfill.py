"""EASY backfill: a reservation for the head job, and the test later jobs must pass.

The *head* is the first job in queue order that cannot start for lack of capacity. Its
reservation is the earliest time ``T`` at which it would fit if every running job ran for its
expected runtime (its estimate, else its maximum runtime, else the profile default) and
nothing else started: the running jobs are released in order of expected end on a fork of
the cluster, and the head is tried after each release. The fork at ``T`` (the *shadow*) holds
what will still run at ``T``.

A later job may start now only if it cannot delay ``T``: it is expected to end by ``T``, or
the head still fits on the shadow with the later job's placements added (each admitted job is
added to the shadow, so later ones see it). With exact runtimes the head starts at ``T`` or
earlier: whatever runs at ``T`` was already on the shadow when the head fitted there.

Tasks being stopped count as ending now, and another job's gang hold as ending at its
timeout. Preemptions in flight come first: the shadow starts with their victims gone and
each preemptor placed, running for its expected runtime from now, and a preemptor is not
held back by the reservation (its placement may differ from the one planned for it, so with
preemption on, the head's start is planned, not guaranteed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError, AllocKey, ClusterState
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.scheduler.books import Books
from hetsched.scheduler.placing import trial, trial_key
from hetsched.scheduler.records import JobRecord

__all__ = ["Reservation", "expected_runtime", "reserve"]


def expected_runtime(job: Job, default_s: float) -> float:
    """The runtime backfill plans with: estimate, else maximum, else the profile default."""
    if job.estimated_runtime_s is not None:
        return job.estimated_runtime_s
    if job.max_runtime_s is not None:
        return job.max_runtime_s
    return default_s


@dataclass(slots=True, eq=False)
class Reservation:
    head: JobRecord
    #: when the head is expected to start
    start: float
    #: the cluster as expected at ``start``, plus the jobs admitted past the head since
    shadow: ClusterState
    #: running jobs that must finish (expectedly) before the head fits
    finishing: list[str] = field(default_factory=list)
    _admitted: int = 0

    def admits(
        self, sched: Books, record: JobRecord, placements: list[Placement], now: float
    ) -> bool:
        """May ``record`` start now on ``placements`` without delaying the head?

        If yes and it will still run at ``start``, its placements join the shadow.
        """
        runtime = expected_runtime(record.job, sched.profile.backfill.default_runtime_s)
        if now + runtime <= self.start:
            return True
        keys: list[AllocKey] = []
        try:
            for placement in placements:
                key: AllocKey = f"{record.id}/backfill{self._admitted}"
                self._admitted += 1
                self.shadow.allocate(key, placement)
                keys.append(key)
        except AllocationError:
            for key in keys:
                self.shadow.release(key)
            return False
        if trial(sched.framework, self.shadow, self.head.job, _needed(self.head), now) is None:
            for key in keys:
                self.shadow.release(key)
            return False
        return True

    def describe(self) -> str:
        who = ", ".join(self.finishing[:5]) + (" ..." if len(self.finishing) > 5 else "")
        return f"reserved to start at t={self.start:g} once {who or 'nothing'} finish(es)"


def _needed(record: JobRecord) -> int:
    return min(record.job.gang_min, len(record.unplaced))


def reserve(sched: Books, head: JobRecord, now: float) -> Reservation | None:
    """The head's reservation, or None when it would not fit even with everything ended."""
    from hetsched.scheduler.preemption import promised_fork

    default = sched.profile.backfill.default_runtime_s
    timeout = sched.profile.gang.timeout_s
    # preemptions in flight were promised first: their victims are gone and the preemptors
    # placed (they run for their expected runtime from now), and the head plans around them
    shadow = promised_fork(sched, now, skip=head)
    ends: list[tuple[float, str, list[AllocKey]]] = []
    for record in sched.promised.values():
        if record is not head:
            keys: list[AllocKey] = [trial_key(record.job, i) for i in range(len(record.unplaced))]
            ends.append((now + expected_runtime(record.job, default), record.id, keys))
    for record in sched.holding_jobs():  # only jobs that hold something can free it
        if record is head:
            # the head's own partial hold is given back: the trial places the whole gang
            for task in record.held:
                shadow.release(TaskKey(record.id, task, record.run + 1))
            continue
        if record.placements and record.started is not None:
            end = max(now, record.started + expected_runtime(record.job, default))
            keys = [TaskKey(record.id, t, record.run) for t in record.placements]
            ends.append((end, record.id, keys))
        if record.stopping:
            ends.append((now, record.id, list(record.stopping)))
        if record.held and record.hold_since is not None:
            keys = [TaskKey(record.id, t, record.run + 1) for t in record.held]
            ends.append((max(now, record.hold_since + timeout), record.id, keys))
    ends.sort(key=lambda e: (e[0], e[1]))
    finishing: list[str] = []
    index = 0
    while index < len(ends):
        end = ends[index][0]
        while index < len(ends) and ends[index][0] == end:
            _, job_id, keys = ends[index]
            for key in keys:
                if key in shadow.allocations:  # victims' and unplaced promises' are not
                    shadow.release(key)
            if job_id not in finishing:
                finishing.append(job_id)
            index += 1
        if trial(sched.framework, shadow, head.job, _needed(head), now) is not None:
            return Reservation(head, end, shadow, finishing)
    return None
