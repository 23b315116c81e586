"""Tasks of requeued jobs that wait for their workload to recreate their pods.

A job the core sends back to its queue (preempted, or its node lost) keeps its identity in
the core; in Kubernetes its pods are deleted. The pods its controller (a Job, a ReplicaSet,
a StatefulSet, ...) or its pod group recreates are matched to it, task by task, rather than
submitted as new jobs. This module keeps those vacancies, per workload, oldest first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hetsched.cluster.placement import Placement
from hetsched.k8s.translate import PodInfo, controller_uid
from hetsched.keys import TaskKey

__all__ = ["Vacancies", "Vacancy", "workload_of"]


def workload_of(obj: dict[str, Any], info: PodInfo) -> str | None:
    """What recreates the pod when it is deleted: its controller (by uid), or its pod
    group; None for a bare pod."""
    uid = controller_uid(obj)
    if uid is not None:
        return f"controller:{uid}"
    if info.group is not None:
        return f"group:{info.namespace}/{info.group}"
    return None


@dataclass(slots=True)
class Vacancy:
    """A task waiting for a recreated pod since ``since``; ``key`` and ``placement`` once the
    core bound the task before the pod came (it is bound as soon as the pod appears)."""

    job_id: str
    task: int
    since: float
    key: TaskKey | None = None
    placement: Placement | None = None


class Vacancies:
    """Vacant tasks by workload (see the module docstring); a task vacant ``timeout_s`` or
    longer is overdue."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._by_workload: dict[str, list[Vacancy]] = {}

    def add(self, workload: str, job_id: str, tasks: Iterable[int], now: float) -> None:
        """Tasks ``tasks`` of the job wait for pods of ``workload`` from ``now``."""
        waiting = self._by_workload.setdefault(workload, [])
        waiting += [Vacancy(job_id, task, now) for task in tasks]

    def postpone(self, job_id: str, since: float) -> None:
        """The job's vacancies count from ``since`` at the earliest: its old pods stay
        until then (a preemption notice), and nothing recreates a pod before they go."""
        for waiting in self._by_workload.values():
            for vacancy in waiting:
                if vacancy.job_id == job_id:
                    vacancy.since = max(vacancy.since, since)

    def take(self, workload: str | None) -> Vacancy | None:
        """The oldest vacancy a new pod of ``workload`` fills, if any."""
        waiting = self._by_workload.get(workload or "")
        return waiting.pop(0) if waiting else None

    def hold(self, key: TaskKey, placement: Placement) -> bool:
        """Keep the core's placement for a vacant task until its pod comes; False if the
        task is not vacant."""
        for waiting in self._by_workload.values():
            for vacancy in waiting:
                if (vacancy.job_id, vacancy.task) == (key.job, key.task):
                    vacancy.key, vacancy.placement = key, placement
                    return True
        return False

    def due(self, now: float) -> bool:
        """Some task is overdue."""
        return any(
            now - v.since >= self.timeout_s
            for waiting in self._by_workload.values()
            for v in waiting
        )

    def expired(self, now: float) -> list[str]:
        """Jobs with an overdue task (their vacancies are dropped)."""
        late = sorted(
            {
                v.job_id
                for waiting in self._by_workload.values()
                for v in waiting
                if now - v.since >= self.timeout_s
            }
        )
        for job_id in late:
            self.drop(job_id)
        return late

    def drop(self, job_id: str) -> None:
        for workload, waiting in list(self._by_workload.items()):
            self._by_workload[workload] = [v for v in waiting if v.job_id != job_id]
