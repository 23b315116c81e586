"""The binding cycle: a job's pods bound to the nodes the core chose, off the scheduling loop.

kube-scheduler decides one pod at a time and hands each decision to an asynchronous binding
cycle, so the next decision does not wait for the API server's answer; the hetsched
scheduler does the same. The core has allocated a Bind's placements already (as
kube-scheduler's cache "assumes" a pod), so the next decisions count them whatever the
binding's outcome; only a failure comes back, and is settled on the scheduling thread.

- Each Bind becomes one :class:`BindJob`: its pods, bound one after the other, in task
  order. The first that fails ends the job's binding: the rest are not tried (a gang binds
  all or nothing; the scheduler deletes the members bound so far). Binds of different jobs
  run on ``workers`` threads at once, over the API client's pool of kept-alive connections.
- With ``workers=0`` every job is bound on the caller's thread as it is submitted (the
  reference the concurrent binding is compared against: the decisions are the same).
- Before a pod's Binding, its ResourceClaims are allocated and reserved for it
  (:mod:`hetsched.k8s.claims.writes`, kube-scheduler's PreBind), and given back if the
  Binding fails. After the Binding, its ``Scheduled`` Event is posted by the same worker.
- :meth:`Binder.take` hands the scheduling thread the outcomes finished since its last
  call; ``wake`` is called after the first one it has not taken, so the loop wakes up.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hetsched.k8s.api import ApiError, ClusterAPI
from hetsched.k8s.claims.writes import ClaimWrite, ClaimWriteError, release, reserve
from hetsched.k8s.podevents import PodEvents
from hetsched.keys import TaskKey

__all__ = ["BindJob", "Binder", "Member", "Outcome"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Member:
    """One pod of a job to bind: ``task`` on ``node``, with the assignment annotations
    that travel in its Binding."""

    key: str
    task: TaskKey
    obj: Obj
    node: str
    annotations: Mapping[str, str] | None = None
    #: its ResourceClaims to allocate and reserve before the Binding
    claims: tuple[ClaimWrite, ...] = ()

    @property
    def namespace(self) -> str:
        return str(self.obj.get("metadata", {}).get("namespace") or "default")

    @property
    def name(self) -> str:
        return str(self.obj.get("metadata", {}).get("name") or "")

    @property
    def uid(self) -> str:
        return str(self.obj.get("metadata", {}).get("uid") or "")


@dataclass(frozen=True, slots=True)
class BindJob:
    """The pods of one Bind action (one job, one run)."""

    job_id: str
    run: int
    members: tuple[Member, ...]


@dataclass(slots=True)
class Outcome:
    """How a job's binding ended: ``bound`` are the members whose Binding succeeded, in
    order; ``failed`` the one that did not (None when all did), ``conflict`` when it failed
    because the pod was bound already (409), with the ``error``."""

    job: BindJob
    bound: list[Member] = field(default_factory=list)
    failed: Member | None = None
    conflict: bool = False
    error: str = ""

    @property
    def complete(self) -> bool:
        return self.failed is None


class Binder:
    """Binds jobs' pods (see the module docstring). ``submit`` and ``take`` are called from
    the scheduling thread; the workers only call the API server."""

    def __init__(
        self,
        api: ClusterAPI,
        events: PodEvents,
        workers: int = 0,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        if workers < 0:
            raise ValueError(f"bind workers must be >= 0, got {workers}")
        self.api = api
        self.events = events
        self.workers = workers
        self.wake = wake
        #: the jobs waiting for a worker (None: a worker's signal to stop), and the workers
        self._jobs: queue.SimpleQueue[BindJob | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._done: list[Outcome] = []
        #: pod key -> its job's binding, while the binding is in flight
        self.in_flight: dict[str, BindJob] = {}

    def submit(self, job: BindJob) -> None:
        for member in job.members:
            self.in_flight[member.key] = job
        if self.workers == 0:
            self._finish(self._bind(job))
            return
        if not self._threads:
            self._threads = [
                threading.Thread(target=self._work, name=f"bind-{i}", daemon=True)
                for i in range(self.workers)
            ]
            for thread in self._threads:
                thread.start()
        self._jobs.put(job)

    def take(self) -> list[Outcome]:
        """The outcomes finished since the last call, in the order they finished; their
        pods are no longer in flight."""
        with self._lock:
            done, self._done = self._done, []
        for outcome in done:
            for member in outcome.job.members:
                if self.in_flight.get(member.key) is outcome.job:
                    del self.in_flight[member.key]
        return done

    def finished(self) -> bool:
        """Some outcome waits to be taken."""
        with self._lock:
            return bool(self._done)

    def close(self) -> None:
        """Wait for the bindings in flight, then stop the workers (a later ``submit``
        starts new ones)."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._run(job)

    def _run(self, job: BindJob) -> None:
        try:
            outcome = self._bind(job)
        except Exception as exc:  # a worker must always answer, whatever went wrong
            log.exception("binding job %s failed", job.job_id)
            outcome = Outcome(job, failed=job.members[0], error=repr(exc))
        self._finish(outcome)

    def _finish(self, outcome: Outcome) -> None:
        """Hand the outcome to the scheduling thread; wake it only for the first outcome
        it has not taken yet (it takes all of them at once)."""
        with self._lock:
            first = not self._done
            self._done.append(outcome)
        if first:
            self.wake()

    def _bind(self, job: BindJob) -> Outcome:
        outcome = Outcome(job)
        for member in job.members:
            error = self._bind_one(member)
            if error is not None:
                outcome.failed, (outcome.conflict, outcome.error) = member, error
                return outcome
            outcome.bound.append(member)
            message = f"Successfully assigned {member.key} to {member.node}"
            self.events.post(member.obj, "Normal", "Scheduled", message, action="Binding")
        return outcome

    def _bind_one(self, member: Member) -> tuple[bool, str] | None:
        """None when bound; else (conflict, why): a conflict is a pod bound by someone
        else. The pod's claims are written first (PreBind), and given back if its Binding
        fails."""
        api: Any = self.api
        try:
            reserve(api, member.claims, member.obj)
        except (ClaimWriteError, ApiError) as exc:
            return False, f"its ResourceClaims: {exc}"
        try:
            won = self.api.bind(
                member.namespace, member.name, member.uid, member.node, member.annotations
            )
        except ApiError as exc:
            release(api, member.claims, member.obj)
            return False, str(exc)
        if not won:
            release(api, member.claims, member.obj)
        return None if won else (True, "bound by someone else (409)")
