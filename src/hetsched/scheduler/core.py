"""The scheduling core: events in, actions out.

``Scheduler.handle(events, now)`` is synchronous and deterministic: it owns no clock,
thread, socket or random source. Drivers (the simulator, the service, the Kubernetes
scheduler) feed it events and carry out the actions it returns.

One call:
  1. apply the events in order (submissions, finishes, cancellations, node and device
     changes), collecting Kill and Reject actions;
  2. run a scheduling cycle: order waiting jobs by the profile's QueueSort and try each;
  3. return the actions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.profile import ProfileSpec
from hetsched.framework.runtime import Framework
from hetsched.framework.status import Code
from hetsched.model.device import Health
from hetsched.model.job import Job, RestartPolicy
from hetsched.model.lifecycle import TERMINAL, JobState
from hetsched.scheduler.actions import Action, Bind, Kill, Pending, Reject
from hetsched.scheduler.events import (
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    NodeAdded,
    NodeRemoved,
    TaskFinished,
    TaskStopped,
    Tick,
)
from hetsched.scheduler.explain import Explanation, explain_placement
from hetsched.scheduler.records import JobRecord

__all__ = ["Scheduler", "task_key"]


def task_key(job_id: str, task: int, run: int) -> str:
    """The allocation key of a task of one run in the cluster state."""
    return f"{job_id}/{task}#{run}"


def _job_of(key: str) -> str:
    return key.rsplit("/", 1)[0]


@dataclass(frozen=True, slots=True)
class _Attempt:
    placements: list[tuple[int, Placement]]
    explanation: Explanation | None


class Scheduler:
    """The core. Holds the cluster state and the book of jobs; see the module docstring."""

    def __init__(
        self, state: ClusterState, profile: ProfileSpec | None = None, seed: int = 0
    ) -> None:
        self.state = state
        self.profile = profile or ProfileSpec()
        self.framework = Framework(self.profile, handle=self, seed=seed)
        self.jobs: dict[str, JobRecord] = {}
        #: grows whenever capacity may have grown (release, node added, device healthy)
        self.capacity_epoch = 0
        self._seq = 0

    # -- the one entry point -------------------------------------------------------------

    def handle(self, events: Iterable[Event], now: float) -> list[Action]:
        actions: list[Action] = []
        for event in events:
            actions += self._apply(event, now)
        actions += self._cycle(now)
        return actions

    # -- queries -------------------------------------------------------------------------

    def record(self, job_id: str) -> JobRecord:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise KeyError(f"unknown job {job_id!r}") from None

    def waiting(self) -> list[JobRecord]:
        """Jobs with tasks to place: pending jobs, and running jobs whose gang minimum was
        below their replicas and that still have tasks to start."""
        return [
            r
            for r in self.jobs.values()
            if r.state is JobState.PENDING or (r.state is JobState.RUNNING and r.unplaced)
        ]

    # -- events --------------------------------------------------------------------------

    def _apply(self, event: Event, now: float) -> list[Action]:
        match event:
            case JobSubmitted(job):
                return self._submit(job, now)
            case JobCancelled(job_id, reason):
                return self._cancel(job_id, reason, now)
            case TaskFinished(job_id, task, run, succeeded, reason):
                return self._finished(job_id, task, run, succeeded, reason, now)
            case TaskStopped(job_id, task, run):
                self._stopped(job_id, task_key(job_id, task, run))
                return []
            case NodeAdded(node):
                self.state.add_node(node)
                self.capacity_epoch += 1
                return []
            case NodeRemoved(name, reason):
                keys = self.state.remove_node(name)
                return self._lose(keys, f"{reason}: {name}", now)
            case DeviceHealthChanged(device_id, health):
                keys = self.state.set_device_health(device_id, health)
                if health is Health.HEALTHY:
                    self.capacity_epoch += 1
                    return []
                return self._lose(keys, f"device {device_id} unhealthy", now)
            case Tick():
                return []
        raise TypeError(f"unknown event {event!r}")  # pragma: no cover

    def _submit(self, job: Job, now: float) -> list[Action]:
        if job.id in self.jobs:
            return [Reject(job.id, f"job id {job.id} already exists")]
        record = JobRecord(job, self._seq, queued_since=now)
        self._seq += 1
        self.jobs[job.id] = record
        record.move(JobState.PENDING, now, "submitted")
        return []

    def _release(self, key: str) -> None:
        self.state.release(key)
        self.capacity_epoch += 1

    def _stop_all(self, record: JobRecord, reason: str, release: bool = False) -> list[Action]:
        """Ask the driver to stop every running task of the current run.

        With ``release`` (the node or device is gone) the allocations are freed at once;
        otherwise they stay held, as ``stopping``, until TaskStopped arrives.
        """
        actions: list[Action] = []
        for task in sorted(record.placements):
            key = task_key(record.id, task, record.run)
            placement = record.placements.pop(task)
            if release:
                self._release(key)
            else:
                record.stopping[key] = placement
            actions.append(Kill(record.id, task, record.run, reason))
        return actions

    def _stopped(self, job_id: str, key: str) -> None:
        record = self.jobs.get(job_id)
        if record is not None and record.stopping.pop(key, None) is not None:
            self._release(key)

    def _cancel(self, job_id: str, reason: str, now: float) -> list[Action]:
        record = self.jobs.get(job_id)
        if record is None or record.state in TERMINAL:
            return []
        actions = self._stop_all(record, reason)
        record.move(JobState.CANCELLED, now, reason)
        record.ended = now
        return actions

    def _finished(
        self, job_id: str, task: int, run: int, succeeded: bool, reason: str, now: float
    ) -> list[Action]:
        record = self.jobs.get(job_id)
        if record is None:
            return []
        key = task_key(job_id, task, run)
        if key in record.stopping:  # it ended on its own while being stopped
            self._stopped(job_id, key)
            return []
        if run != record.run or task not in record.placements:
            return []  # a stale report: that task holds nothing any more
        del record.placements[task]
        self._release(key)
        if succeeded:
            record.finished.add(task)
            if len(record.finished) == record.job.replicas:
                record.move(JobState.SUCCEEDED, now, "all tasks succeeded")
                record.ended = now
            return []
        cause = f"task {task} failed" + (f": {reason}" if reason else "")
        actions = self._stop_all(record, cause)
        job = record.job
        if job.restart_policy is RestartPolicy.ON_FAILURE and record.restarts < job.max_restarts:
            record.restarts += 1
            self._requeue(record, now, f"{cause}; restart {record.restarts}/{job.max_restarts}")
        else:
            record.move(JobState.FAILED, now, cause)
            record.ended = now
        return actions

    def _lose(self, keys: list[str], cause: str, now: float) -> list[Action]:
        """Tasks whose node or device went away: free what they held on it, stop the rest
        of their job, and requeue the job."""
        actions: list[Action] = []
        for key in keys:
            record = self.jobs[_job_of(key)]
            if record.stopping.pop(key, None) is not None:
                self._release(key)
                continue
            task = int(key.rsplit("/", 1)[1].split("#")[0])
            if record.placements.pop(task, None) is not None:
                self._release(key)
                actions.append(Kill(record.id, task, record.run, cause))
        for job_id in dict.fromkeys(_job_of(k) for k in keys):
            record = self.jobs[job_id]
            if record.state is JobState.RUNNING:
                actions += self._stop_all(record, cause)
                self._requeue(record, now, cause)
        return actions

    def _requeue(self, record: JobRecord, now: float, cause: str) -> None:
        record.finished.clear()
        record.started = None
        record.queued_since = now
        record.failed_epoch = -1
        record.move(JobState.PENDING, now, cause)

    # -- the scheduling cycle ------------------------------------------------------------

    def _cycle(self, now: float) -> list[Action]:
        """Try every waiting job in queue order; a job that does not fit is skipped
        (later jobs may pass it) and not retried until capacity grows."""
        actions: list[Action] = []
        order = sorted(self.waiting(), key=lambda r: self.framework.sort_key(r, now))
        for record in order:
            if record.failed_epoch == self.capacity_epoch:
                continue
            attempt = self._attempt(record, now)
            if attempt.placements:
                actions.append(self._bind(record, attempt.placements, now))
            elif attempt.explanation is not None:
                record.failed_epoch = self.capacity_epoch
                if record.explanation != attempt.explanation:
                    record.explanation = attempt.explanation
                    actions.append(Pending(record.id, attempt.explanation))
        return actions

    def _attempt(self, record: JobRecord, now: float) -> _Attempt:
        """Place the job's tasks, all-or-nothing up to its gang minimum.

        Tasks are allocated on the live state as they are chosen (later tasks see earlier
        ones) and released again if fewer than the gang minimum fit.
        """
        job = record.job
        ctx = CycleContext(self.state, job, job.resources, now)
        tasks = record.unplaced
        running = record.state is JobState.RUNNING
        # a running job adds tasks to its current run one at a time; a pending one starts a
        # new run and needs its gang minimum at once
        run = record.run if running else record.run + 1
        needed = 1 if running else min(job.gang_min, len(tasks))
        placed: list[tuple[int, Placement]] = []
        if not self.framework.prefilter(ctx).ok:
            return _Attempt([], explain_placement(self.framework, ctx, 0, needed))
        for task in tasks:
            placement = self.framework.select(ctx)
            if placement is None:
                break
            key = task_key(job.id, task, run)
            self.state.allocate(key, placement)
            status = self.framework.reserve(ctx, placement)
            if not status.ok:
                self.state.release(key)
                break
            placed.append((task, placement))
        status = self.framework.permit(ctx, [p for _, p in placed])
        if len(placed) >= needed and status.ok:
            return _Attempt(placed, None)
        explanation = explain_placement(self.framework, ctx, len(placed), needed)
        for task, placement in reversed(placed):
            self.framework.unreserve(ctx, placement)
            self.state.release(task_key(job.id, task, run))
        if not status.ok and len(placed) >= needed:
            explanation = Explanation(Code.UNSCHEDULABLE, str(status))
        return _Attempt([], explanation)

    def _bind(self, record: JobRecord, placed: list[tuple[int, Placement]], now: float) -> Bind:
        ctx = CycleContext(self.state, record.job, record.job.resources, now)
        self.framework.bind(ctx, [p for _, p in placed])
        for task, placement in placed:
            record.placements[task] = placement
        record.explanation = None
        if record.state is JobState.RUNNING:
            return Bind(record.id, record.run, tuple(placed))
        record.run += 1
        record.started = now
        nodes = sorted({p.node for _, p in placed})
        record.move(
            JobState.RUNNING,
            now,
            f"run {record.run}: bound {len(placed)} task(s) to " + ", ".join(nodes),
        )
        return Bind(record.id, record.run, tuple(placed))
