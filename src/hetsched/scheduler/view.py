"""The core as a driver may read it between calls: :class:`SchedulerView`.

Drivers learn what happens from the actions; this view answers the questions a driver is
asked in between (an API's job and node pages, metrics, the Kubernetes extender's what-ifs).
It copies what it returns, so nothing a driver holds can change the core's books, and the
cluster state it exposes is for reading (fork it for a what-if).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState, Transition
from hetsched.scheduler.books import Books
from hetsched.scheduler.checkpoints import work_lost
from hetsched.scheduler.explain import Explanation
from hetsched.scheduler.tally import Shape
from hetsched.scheduler.whatif import WhatIf, what_if

__all__ = ["JobView", "QueueUse", "SchedulerView"]


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the core sees it now (a copy)."""

    job: Job
    state: JobState | None
    #: its current run (0 before its first start)
    run: int
    restarts: int
    preemptions: int
    #: task -> placement, for the running tasks of the current run
    placements: Mapping[int, Placement]
    #: when it entered the queue this time (submission or requeue)
    queued_since: float
    started: float | None
    ended: float | None
    explanation: Explanation | None
    history: tuple[Transition, ...]

    @property
    def id(self) -> str:
        return self.job.id


@dataclass(frozen=True, slots=True)
class QueueUse:
    """One queue of the profile's queue tree and one flavor: nominal quota, use now, what it
    borrows (above nominal) and what is free (below it). Device flavors count devices, cpu
    millicores, memory MiB."""

    quota: float
    used: float
    borrowed: float
    free: float


class SchedulerView:
    """Read-only questions about the core (see the module docstring)."""

    def __init__(self, core: Books) -> None:
        self._core = core

    @property
    def cluster(self) -> ClusterState:
        """The live cluster state: read it, never change it (``fork()`` it for a what-if)."""
        return self._core.state

    def job(self, job_id: str) -> JobView | None:
        record = self._core.jobs.get(job_id)
        if record is None:
            return None
        return JobView(
            record.job,
            record.state,
            record.run,
            record.restarts,
            record.preemptions,
            MappingProxyType(dict(record.placements)),
            record.queued_since,
            record.started,
            record.ended,
            record.explanation,
            tuple(record.history),
        )

    def waiting_for(self, job_id: str) -> Explanation | None:
        """What a held job waits for now, with how far those jobs got; None for a job
        that is not held (its dependencies met, or it has none)."""
        return self._core.workflow.explain(self._core, job_id)

    def promised(self, job_id: str) -> bool:
        """Whether the core keeps room for the job: it preempted others and has not started
        (nor been given up on) since."""
        record = self._core.jobs.get(job_id)
        return record is not None and record.promised

    def jobs(self) -> list[JobView]:
        """Jobs not in a terminal state, in arrival order."""
        out = []
        for record in self._core.active_jobs():
            view = self.job(record.id)
            assert view is not None
            out.append(view)
        return out

    def live_jobs(self) -> list[Job]:
        """The jobs not in a terminal state, in arrival order (cheap: no copies)."""
        return [record.job for record in self._core.active_jobs()]

    def running_placements(self) -> dict[tuple[str, int], Placement]:
        """(job, task) -> placement of every running task (read from the jobs that hold
        resources: waiting jobs cost nothing)."""
        return {
            (record.id, task): placement
            for record in self._core.holding_jobs()
            for task, placement in record.placements.items()
        }

    @property
    def now(self) -> float:
        """The time of the core's last ``handle`` call."""
        return self._core.now

    def what_if(self, job: Job) -> WhatIf:
        """Would ``job`` (one the core does not hold) fit now, when, or never, at the time
        of the last ``handle`` call (``hetsched.scheduler.whatif``): nothing changes."""
        return what_if(self._core, job, self._core.now)

    def counts(self) -> tuple[Counter[str], int]:
        """Pending jobs per queue, and running jobs (from counters kept as jobs move)."""
        return self._core.tally.counts()

    def oldest_pending(self, now: float) -> dict[str, float]:
        """Per queue, how long its longest-waiting pending job has waited."""
        return self._core.tally.oldest_pending(now)

    def live_shapes(self, device_class: str) -> Counter[Shape]:
        """The task shapes live jobs ask of ``device_class`` (each job's first request of
        that class), with how many tasks ask for each (from counters, not a scan)."""
        return self._core.tally.shapes(device_class)

    def checkpoint_ages(self, now: float) -> dict[str, list[float]]:
        """Per queue, for each running job that checkpoints: seconds since its current run's
        last checkpoint (since the run started, without one; 0 for a job that checkpoints
        continuously), the work a stop now would lose."""
        ages: dict[str, list[float]] = {}
        for record in self._core.active_jobs():
            if record.state is JobState.RUNNING and record.job.checkpoint is not None:
                ages.setdefault(record.job.queue, []).append(work_lost(record, now))
        return ages

    def quotas(self) -> dict[str, dict[str, QueueUse]]:
        """Per queue of the profile's tree and per flavor: quota, use, borrowed, free
        (empty without a queue tree). Devices in devices, cpu in millicores, memory in MiB."""
        quotas = self._core.quotas
        if not quotas.enabled:
            return {}
        usage = quotas.usage(self._core.ledger)
        known = quotas.flavors | {"cpu", "memory"}
        out: dict[str, dict[str, QueueUse]] = {}
        for name, node in quotas.nodes.items():
            used: Mapping[str, int] = usage.get(name, {})
            flavors = sorted(set(node.nominal) | {f for f, a in used.items() if a and f in known})
            per: dict[str, QueueUse] = {}
            for flavor in flavors:
                scale = 1.0 if flavor in ("cpu", "memory") else 1000.0
                nominal = quotas.nominal(name, flavor) / scale
                held = used.get(flavor, 0) / scale
                per[flavor] = QueueUse(
                    nominal, held, max(0.0, held - nominal), max(0.0, nominal - held)
                )
            out[name] = per
        return out
