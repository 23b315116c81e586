"""Which pods are which jobs' tasks: the Kubernetes scheduler's membership bookkeeping.

A job of the core is one pod, or the pods of one pod group; :class:`Membership` keeps the
two maps between them (``owner``: pod key -> (job, task); ``members``: job -> pod keys by
task) and what changes them: a job submitted (one pod, or a group once its minimum is
there), a pod that ends, is deleted or is bound by someone else, a requeued job whose pods
wait to be recreated by their workload (filled task by task by the pods that come), and
the jobs whose pods never came back. It is a part of
:class:`~hetsched.k8s.scheduler.PodScheduler`, whose state it reads and changes under the
scheduler's lock; it holds no state of its own.
"""

from __future__ import annotations

import itertools
from typing import Any

from hetsched.drivers import Exit, Interpreter
from hetsched.k8s.claims.requests import ClaimError
from hetsched.k8s.claims.side import ClaimSide
from hetsched.k8s.nominate import Nominations
from hetsched.k8s.podevents import PodEvents
from hetsched.k8s.podexec import PodExecutor
from hetsched.k8s.podgroups import PodGroups
from hetsched.k8s.recreate import Vacancies, workload_of
from hetsched.k8s.translate import PodInfo, TranslateError, group_job, pod_info
from hetsched.keys import TaskKey
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Event, JobCancelled, JobSubmitted, Scheduler

__all__ = ["Membership"]

Obj = dict[str, Any]


class Membership:
    """Pods as tasks of jobs (see the module doc); mixed into the scheduler."""

    # the scheduler's state this part reads and changes
    core: Scheduler
    pods: dict[str, Obj]
    owner: dict[str, tuple[str, int]]
    members: dict[str, list[str]]
    _run: dict[str, int]
    _state: dict[str, JobState]
    _workloads: dict[str, str | None]
    vacant: Vacancies
    _groups: PodGroups
    _seq: itertools.count[int]
    rechecks: list[str]
    recreate_timeout_s: float
    dra: ClaimSide
    events: PodEvents
    nominations: Nominations
    executor: PodExecutor
    interpreter: Interpreter

    def _init_membership(self, recreate_timeout_s: float) -> None:
        self.recreate_timeout_s = recreate_timeout_s
        #: pod key -> (job id, task): pods the core holds as tasks of a job
        self.owner = {}
        #: job id -> its pods' keys, by task index ("" while the task has no pod)
        self.members = {}
        #: job id -> its current run and state, as the core's actions told them
        self._run = {}
        self._state = {}
        #: job id -> what recreates its pods (see workload_of), None for bare pods
        self._workloads = {}
        #: tasks of requeued jobs waiting for their workload to recreate a pod
        self.vacant = Vacancies(recreate_timeout_s)
        #: pods of pod groups waiting to reach their minimum
        self._groups = PodGroups()
        self._seq = itertools.count()

    def _owned_change(self, info: PodInfo, owned: tuple[str, int]) -> list[Event]:
        """A pod that is a task of a job changed: it ended, or someone else bound it."""
        job_id, task = owned
        if info.terminal:
            del self.owner[info.key]
            key = TaskKey(job_id, task, self._run.get(job_id, 1))
            event = self.interpreter.report(Exit(key, info.phase == "Succeeded", info.phase))
            return [event] if event is not None else []
        if info.node_name and self._state.get(job_id) is JobState.PENDING:
            # bound while it waited in our queue, by someone else (another scheduler, a
            # user, a former leader): stop placing it and count it where it went
            self.rechecks.append(info.key)
            return self._withdraw(job_id, info.key, f"bound to {info.node_name} by another")
        return []

    def _pod_gone(self, key: str) -> list[Event]:
        self.events.reported.pop(key, None)
        self.nominations.forget(key)
        stopped = self.executor.gone(key)
        if stopped is not None:
            event = self.interpreter.report(Exit(stopped, False, "pod deleted"))
            return [event] if event is not None else []
        if self._groups.discard(key):
            return []
        owned = self.owner.pop(key, None)
        if owned is None:
            return []
        job_id, task = owned
        if self._state.get(job_id) is JobState.PENDING:
            return self._withdraw(job_id, key, f"pod {key} deleted")
        ran = TaskKey(job_id, task, self._run.get(job_id, 1))
        event = self.interpreter.report(Exit(ran, False, "pod deleted"))
        return [event] if event is not None else []

    def _fill(self, info: PodInfo, obj: Obj) -> bool:
        """A new pending pod of a workload whose requeued job waits for a recreated pod
        takes that job's task (bound at once if the core placed the task already)."""
        vacancy = self.vacant.take(workload_of(obj, info))
        if vacancy is None:
            return False
        job_id, task = vacancy.job_id, vacancy.task
        self.members[job_id][task] = info.key
        self.owner[info.key] = (job_id, task)
        self.executor.filled(job_id)
        return True

    def _vacate(self, job_id: str, now: float) -> list[Event]:
        """A job went back to the queue: the pods of its tasks that ran are gone or going
        (those that never bound stay its tasks). They wait for their workload to recreate
        them; a job of bare pods is cancelled instead (nothing will ever run it again)."""
        self.executor.requeued(job_id)
        workload = self._workloads.get(job_id)
        members = self.members.get(job_id, [])
        notices = self.executor.notices.pending
        # pods in their notice stay until it ends: nothing recreates them before
        since = max([now] + [notices[k].deadline for k in members if k in notices])
        vacant = []
        for task, key in enumerate(members):
            if key and self.owner.get(key) == (job_id, task):
                continue  # still its pod, never bound: it waits with the job
            members[task] = ""
            vacant.append(task)
        if not vacant:
            return []
        if workload is None:
            return [JobCancelled(job_id, "its pods were deleted and no controller recreates them")]
        self.vacant.add(workload, job_id, vacant, since)
        return []

    def _expired_vacancies(self, now: float) -> list[Event]:
        """Jobs whose pods were not recreated in time are cancelled."""
        reason = f"no pod was recreated for it within {self.recreate_timeout_s:g}s"
        late = self.vacant.expired(now)
        return [JobCancelled(job_id, reason) for job_id in late]

    def _own(self, job_id: str, keys: list[str], workload: str | None) -> None:
        self.members[job_id] = list(keys)
        self._workloads[job_id] = workload
        for task, key in enumerate(keys):
            self.owner[key] = (job_id, task)

    def _withdraw(self, job_id: str, key: str, reason: str) -> list[Event]:
        """Cancel a pending job that lost its pod ``key``; the rest of a gang's pods wait
        for their group's minimum again."""
        self.owner.pop(key, None)
        self.dra.book.forget(key)
        self.vacant.drop(job_id)
        for other in self.members.get(job_id, []):
            if other == key or self.owner.pop(other, None) is None or other not in self.pods:
                continue
            info = pod_info(self.pods[other])
            if info.group is not None:
                self._groups.again(f"{info.namespace}/{info.group}", other)
        return [JobCancelled(job_id, reason)]

    def _submit_groups(self, now: float) -> list[Event]:
        events: list[Event] = []
        for group, keys, minimum in self._groups.ready(self.pods, self.events.failed_scheduling):
            job_id = f"{group}#g{next(self._seq)}"
            try:
                job = group_job(job_id, [self.pods[k] for k in keys], minimum, now)
                job = self.dra.book.group_request(keys, self.pods, job)
            except (TranslateError, ClaimError) as exc:
                for key in keys:
                    self.events.failed_scheduling(self.pods[key], str(exc))
                continue
            self._groups.take(group)
            self._own(job_id, keys, f"group:{group}")
            events.append(JobSubmitted(job))
        return events

    def _waits_for_room(self, job_id: str) -> bool:
        """The job waits, with room kept for it by the preemptions it started."""
        return self._state.get(job_id) is JobState.PENDING and self.core.view.promised(job_id)

    def _pending_pods(self, job_id: str) -> list[str]:
        return [
            k
            for k in self.members.get(job_id, [])
            if k in self.pods and not pod_info(self.pods[k]).node_name
        ]

    def held_node(self, key: str) -> str:
        """The node where the core holds pod ``key``'s allocation (an assumed binding
        whose pod the watch may still show unbound); empty when it holds none."""
        owned = self.owner.get(key)
        if owned is None:
            return ""
        view = self.core.view.job(owned[0])
        placement = view.placements.get(owned[1]) if view is not None else None
        return placement.node if placement is not None else ""
