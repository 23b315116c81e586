"""The Kubernetes scheduler's executor: it starts tasks by binding their pods and stops them
by deleting their pods.

- **Start** (one Bind): the job's pods go to the binding cycle as one
  :class:`~hetsched.k8s.binding.BindJob`. A task whose pod is gone and not recreated yet
  (a requeued job waiting for its controller) holds the whole Bind until the pod comes:
  a job binds whole.
- **A binding that fails** means the run never ran as a whole: the core is told
  (StartFailed, backed off 1 s doubling to 10 s per failure in a row, as kube-scheduler backs
  off a pod), stops the run and requeues the job; the Kills that follow delete the members
  bound so far, and the others stay pending pods of the job. A lone pod bound by someone
  else first (409) is no longer ours: its job is cancelled and the pod accounted where it
  went.
- **Stop**: the pod is deleted with the grace period (a ``Preempted`` or ``Killing``
  Event first) and its exit is reported once it is gone; a pod that never bound is
  reported at once and kept; a pod whose binding is in flight is stopped when the binding
  ends. A stop with a notice first gives the pod its preemption notice and deletes it
  when the notice ends (:mod:`hetsched.k8s.notices`).
- **Resuming**: the Binding of a checkpointable job's pod carries where it resumes from
  (:func:`hetsched.k8s.checkpoints.resume_annotations`).
- **Exits** come by callback: a pod's end is handed to the interpreter as the watch shows
  it (its ``poll`` has none). Of the optional capabilities it has
  :class:`~hetsched.drivers.executor.GivesNotice`; pods are the API server's to keep, so
  there is nothing to adopt, fence or kill by pid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from hetsched.drivers import Exit, Interpreter, Start, Stop
from hetsched.k8s.api import ApiError, ClusterAPI
from hetsched.k8s.binding import Binder, BindJob, Member, Outcome
from hetsched.k8s.checkpoints import resume_annotations
from hetsched.k8s.claims.book import ClaimBook
from hetsched.k8s.claims.requests import ClaimError
from hetsched.k8s.listwatch import ListWatch
from hetsched.k8s.nominate import Nominations
from hetsched.k8s.notices import Notice, Notices
from hetsched.k8s.podevents import PodEvents
from hetsched.k8s.recreate import Vacancies
from hetsched.k8s.translate import PodInfo, TranslateError, assignment_annotations, pod_info
from hetsched.keys import TaskKey
from hetsched.scheduler import Event, JobCancelled, StartFailed


class _Claims(Protocol):
    """The scheduler's DRA side, as the executor uses it: the claims of the pods it binds."""

    book: ClaimBook


class PodScheduler(Protocol):
    """What the executor reads and keeps of the Kubernetes scheduler it works for
    (:class:`hetsched.k8s.scheduler.PodScheduler`)."""

    api: ClusterAPI
    name: str
    events: PodEvents
    nominations: Nominations
    watch: ListWatch
    vacant: Vacancies
    interpreter: Interpreter
    pods: dict[str, dict[str, Any]]
    owner: dict[str, tuple[str, int]]
    members: dict[str, list[str]]
    followups: list[Event]
    rechecks: list[str]
    clock: Callable[[], float]

    @property
    def dra(self) -> _Claims: ...

    def started_run(self, job_id: str, run: int) -> None: ...

    def running_run(self, job_id: str) -> int | None: ...


__all__ = ["BIND_BACKOFF_S", "BIND_MAX_BACKOFF_S", "PodExecutor"]

log = logging.getLogger(__name__)

#: a job whose binding failed is tried again after this, doubling per failure in a row up
#: to BIND_MAX_BACKOFF_S (kube-scheduler's podInitialBackoffSeconds, podMaxBackoffSeconds)
BIND_BACKOFF_S = 1.0
BIND_MAX_BACKOFF_S = 10.0


class PodExecutor:
    """Binds and deletes the pods of ``sched`` (see the module docstring); the interpreter's
    executor. Everything but the binding workers runs on the scheduling thread."""

    def __init__(self, sched: PodScheduler, bind_workers: int) -> None:
        self.sched = sched
        self.binder = Binder(sched.api, sched.events, bind_workers, sched.watch.wake)
        #: every bind this instance carried out: (pod key, node); conflicts: pod keys
        self.bound: list[tuple[str, str]] = []
        self.conflicts: list[str] = []
        #: pods this instance bound, until they are gone
        self.bound_pods: set[str] = set()
        #: pod key -> the task it ran, for pods asked to stop, until they are gone
        self.stopping: dict[str, TaskKey] = {}
        #: pods whose bind we lost (409), until we see them bound
        self.lost: set[str] = set()
        #: pod key -> a stop that waits for the pod's binding to end first
        self._deferred: dict[str, tuple[TaskKey, float, str, bool, float]] = {}
        #: pods in their preemption notice (deleted when it ends)
        self.notices = Notices()
        #: job id -> the starts of a Bind that waits for recreated pods
        self._waiting: dict[str, list[Start]] = {}
        #: job id -> bindings of it that failed in a row
        self._failures: dict[str, int] = {}

    # -- the executor protocol (drivers/executor.py) ------------------------------------

    def start(self, tasks: Sequence[Start], now: float) -> None:
        if not tasks:
            return
        sched = self.sched
        job_id = tasks[0].key.job
        sched.started_run(job_id, tasks[0].key.run)
        members = sched.members.get(job_id, [])
        ready: list[Start] = []
        held: list[Start] = []
        for start in tasks:
            task = start.key.task
            pod_key = members[task] if task < len(members) else ""
            if not pod_key and sched.vacant.hold(start.key, start.placement):
                held.append(start)
            elif pod_key not in sched.pods:
                self._exit(start.key, "pod gone before bind")
            else:
                ready.append(start)
        if held:
            waiting = self._waiting.setdefault(job_id, [])
            waiting += sorted(ready + held, key=lambda s: s.key.task)
        elif ready:
            self._submit(ready)

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        sched = self.sched
        for stop in tasks:
            members = sched.members.get(stop.key.job, [])
            task = stop.key.task
            pod_key = members[task] if task < len(members) else ""
            if stop.key in self._stopping_tasks():
                # asked before (a notice being cut short): its pod, though the job's
                # members may have moved on to the pods that replace it
                pod_key = self._stopping_tasks()[stop.key]
            # a Migrate's stops name the job they make room for too; they say "migrating"
            moved = stop.reason.startswith("migrating")
            reason = f"preempted: {stop.reason}" if stop.preemptor and not moved else stop.reason
            if stop.preemptor:
                sched.nominations.victim(stop.preemptor, stop.placement.node)
            if pod_key in self.notices.pending and self.stopping.get(pod_key) == stop.key:
                self._shorten(pod_key, now, stop.notice_s)
                continue
            self._stop_pod(
                pod_key, stop.key, stop.grace_s, reason, bool(stop.preemptor), stop.notice_s, now
            )

    def poll(self, now: float) -> list[Exit]:
        return []  # a pod's end is reported as the watch shows it

    def shutdown(self) -> None:
        """Wait for the bindings in flight and stop the binding workers."""
        self.binder.close()

    def in_notice(self, key: TaskKey) -> bool:
        pod_key = self._stopping_tasks().get(key)
        return pod_key is not None and pod_key in self.notices.pending

    def _stopping_tasks(self) -> dict[TaskKey, str]:
        """Task -> its pod, for the pods asked to stop (few: those going away now)."""
        return {task: key for key, task in self.stopping.items()}

    def expire(self, now: float) -> None:
        """Delete the pods whose notice is over at ``now``."""
        for key, notice in self.notices.due(now):
            self._end_notice(key, notice)

    def end_notice(self, key: str) -> None:
        """Pod ``key`` is in its notice and its container ended: delete it now."""
        notice = self.notices.end(key)
        if notice is not None:
            self._end_notice(key, notice)

    def _shorten(self, key: str, now: float, notice_s: float) -> None:
        """A second stop of a pod in its notice: at once when it has no notice (the pod
        reported a checkpoint), else by the sooner deadline."""
        if notice_s > 0:
            self.notices.shorten(key, now + notice_s)
            return
        notice = self.notices.end(key)
        if notice is not None:
            self._end_notice(key, notice)

    def _end_notice(self, key: str, notice: Notice) -> None:
        obj = self.sched.pods.get(key)
        if obj is None or key not in self.stopping:
            return  # gone meanwhile: its exit is reported (or on its way)
        self._delete(obj, pod_info(obj), notice.grace_s, notice.why, notice.preempted)

    # -- what the scheduler tells it -----------------------------------------------------

    def filled(self, job_id: str) -> None:
        """A recreated pod took a task of ``job_id``: bind its waiting Bind once every
        task of it has a pod."""
        waiting = self._waiting.get(job_id, [])
        members = self.sched.members.get(job_id, [])
        if waiting and all(members[s.key.task] for s in waiting):
            del self._waiting[job_id]
            self._submit(waiting)

    def requeued(self, job_id: str) -> None:
        """The job went back to the queue: a Bind it waited with is void."""
        self._waiting.pop(job_id, None)

    def gone(self, key: str) -> TaskKey | None:
        """Pod ``key`` was deleted: the task it ran, if it was asked to stop."""
        self.notices.end(key)
        self.bound_pods.discard(key)
        self.lost.discard(key)
        return self.stopping.pop(key, None)

    def settle(self) -> None:
        """Handle the bindings that ended since the last call."""
        for outcome in self.binder.take():
            self._settled(outcome)

    # -- binding -------------------------------------------------------------------------

    def _exit(self, key: TaskKey, reason: str) -> None:
        """An exit known at once: reported to the core in the next round."""
        event = self.sched.interpreter.report(Exit(key, False, reason))
        if event is not None:
            self.sched.followups.append(event)

    def _submit(self, starts: Sequence[Start]) -> None:
        sched = self.sched
        members = []
        book = sched.dra.book
        for start in starts:
            key = sched.members[start.key.job][start.key.task]
            obj = sched.pods[key]
            placement = start.placement
            # the device plugin's assignment travels in the Binding: set with
            # spec.nodeName in one update, so a binding that fails leaves no annotation
            plugin = book.plugin_part(key, placement)
            annotations = assignment_annotations(obj, plugin) if plugin.devices else {}
            try:
                annotations.update(resume_annotations(obj, start.resume))
            except TranslateError as exc:  # read when it was submitted: changed since
                log.warning("pod %s: %s", key, exc)
            try:
                claims = book.writes(key, placement)
            except ClaimError as exc:  # the core's choice does not read as the claims'
                log.error("pod %s: %s", key, exc)
                reason = f"pod {key}: {exc}"
                first = start.key
                sched.followups.append(
                    StartFailed(first.job, first.run, reason, BIND_MAX_BACKOFF_S)
                )
                return
            members.append(Member(key, start.key, obj, placement.node, annotations or None, claims))
        first = starts[0].key
        self.binder.submit(BindJob(first.job, first.run, tuple(members)))

    def _settled(self, outcome: Outcome) -> None:
        job = outcome.job
        for member in outcome.bound:
            self.bound.append((member.key, member.node))
            self.bound_pods.add(member.key)
            self.sched.dra.book.bound(member.key)
            self.sched.events.reported.pop(member.key, None)
            self.sched.nominations.clear(member.key)
        if outcome.failed is None:
            self._failures.pop(job.job_id, None)
        else:
            self._failed(outcome, outcome.failed)
        for member in job.members:
            deferred = self._deferred.pop(member.key, None)
            if deferred is not None:
                self._stop_pod(member.key, *deferred)

    def _failed(self, outcome: Outcome, failed: Member) -> None:
        sched, job = self.sched, outcome.job
        log.warning("binding %s to %s failed: %s", failed.key, failed.node, outcome.error)
        if outcome.conflict:
            # someone else bound it first: not ours any more; once our allocation is gone
            # it is accounted where it went (the watch shows where)
            self.conflicts.append(failed.key)
            self.lost.add(failed.key)
            sched.owner.pop(failed.key, None)
            sched.rechecks.append(failed.key)
        else:
            message = f"binding to {failed.node} failed: {outcome.error}"
            sched.events.failed_scheduling(failed.obj, message)
        if sched.running_run(job.job_id) != job.run:
            return  # the run ended meanwhile (cancelled, preempted): nothing to undo
        if outcome.conflict and len(sched.members.get(job.job_id, [])) == 1:
            sched.followups.append(JobCancelled(job.job_id, outcome.error))
            return
        count = self._failures.get(job.job_id, 0) + 1
        self._failures[job.job_id] = count
        backoff = min(BIND_MAX_BACKOFF_S, BIND_BACKOFF_S * 2 ** (count - 1))
        reason = f"binding {failed.key} to {failed.node} failed: {outcome.error}"
        sched.followups.append(StartFailed(job.job_id, job.run, reason, backoff))

    # -- stopping ------------------------------------------------------------------------

    def _stop_pod(
        self,
        key: str,
        task: TaskKey,
        grace_s: float,
        why: str,
        preempted: bool,
        notice_s: float = 0.0,
        now: float | None = None,
    ) -> None:
        sched = self.sched
        if key in self.binder.in_flight:
            self._deferred[key] = (task, grace_s, why, preempted, notice_s)
            return  # stopped once its binding ends: deleted if it bound
        waiting = self._waiting.get(task.job)
        if waiting:
            self._waiting[task.job] = [s for s in waiting if s.key != task]
        obj = sched.pods.get(key)
        if obj is None or key in self.lost or pod_info(obj).scheduler_name != sched.name:
            # gone already, bound by someone else, or not ours to delete: nothing of ours
            # runs there, so its allocation is free now
            self._exit(task, "not running")
            return
        info = pod_info(obj)
        if key not in self.bound_pods and not info.node_name:
            # never bound (its binding, or its job's, failed): nothing runs; the pod stays
            # a pending pod of its job
            self._exit(task, "never bound")
            return
        self.stopping[key] = task
        sched.owner.pop(key, None)
        if notice_s > 0 and not info.terminal:
            clock = sched.clock() if now is None else now
            notice = Notice(task, clock + notice_s, grace_s, why, preempted)
            sched.vacant.postpone(task.job, notice.deadline)
            self.notices.give(sched.api, sched.events, obj, info, notice, notice_s)
            return
        self._delete(obj, info, grace_s, why, preempted)

    def _delete(
        self, obj: dict[str, Any], info: PodInfo, grace_s: float, why: str, preempted: bool
    ) -> None:
        sched = self.sched
        sched.events.post(obj, "Normal", "Preempted" if preempted else "Killing", why)
        try:
            sched.api.delete_pod(info.namespace, info.name, int(grace_s))
        except ApiError as exc:
            log.warning("deleting pod %s failed: %s", info.key, exc)
