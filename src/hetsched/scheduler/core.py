"""The scheduling core: events in, actions out.

``Scheduler.handle(events, now)`` is synchronous and deterministic: it owns no clock,
thread, socket or random source. Drivers (the simulator, the service, the Kubernetes
scheduler) feed it events and carry out the actions it returns.

One call:
  1. integrate usage up to ``now`` (fair-share history);
  2. apply the events in order (submissions, finishes, checkpoints, cancellations, node and
     device changes), emitting Kill, Reject and JobTransition actions;
  3. apply the time-based rules: maximum runtime (Kill), maximum pending time (Reject),
     gang hold timeouts (release and backoff);
  4. run a scheduling cycle (``hetsched.scheduler.cycle``): Bind, Preempt and Pending;
  5. return the actions, in the order they were taken.

Every change of a job's state is emitted as a :class:`JobTransition` (one per entry of its
history), so a driver learns what happened to a job from the actions alone.

Every allocation goes through :meth:`Scheduler.allocate` and every release through
:meth:`Scheduler.release` (or :meth:`Scheduler.unallocate` to undo a trial), so the usage
ledger always matches the cluster state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError, AllocKey, ClusterState
from hetsched.framework.handle import DecayedView, UsageView
from hetsched.framework.profile import ProfileError, ProfileSpec, check_queues
from hetsched.framework.registry import Registry
from hetsched.framework.runtime import Framework
from hetsched.framework.status import Code
from hetsched.keys import TaskKey
from hetsched.model.device import Health
from hetsched.model.job import DeviceFailurePolicy, Job, RestartPolicy
from hetsched.model.lifecycle import TERMINAL, JobState, Transition
from hetsched.queueing.waiting import WaitingQueue
from hetsched.scheduler.actions import (
    Action,
    Bind,
    Change,
    JobTransition,
    Kill,
    Preempt,
    PreemptionKind,
    Reject,
)
from hetsched.scheduler.cycle import placed_in_line, run_cycle
from hetsched.scheduler.deadlines import Deadlines
from hetsched.scheduler.events import (
    DeviceAdded,
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    TaskCheckpointed,
    TaskFinished,
    TaskStopped,
    Tick,
)
from hetsched.scheduler.explain import Explanation
from hetsched.scheduler.quota import QuotaTree
from hetsched.scheduler.records import BlockedBy, JobRecord
from hetsched.scheduler.usage import Ledger, placement_usage
from hetsched.scheduler.view import SchedulerView

__all__ = ["Scheduler"]

#: the Change a transition into each terminal state records
_ENDS = {
    JobState.SUCCEEDED: Change.SUCCEEDED,
    JobState.FAILED: Change.FAILED,
    JobState.CANCELLED: Change.CANCELLED,
    JobState.REJECTED: Change.REJECTED,
}


class Scheduler:
    """The core. Holds the cluster state and the book of jobs; see the module docstring."""

    def __init__(
        self,
        state: ClusterState,
        profile: ProfileSpec | None = None,
        seed: int = 0,
        registry: Registry | None = None,
    ) -> None:
        self.state = state
        self.profile = profile or ProfileSpec()
        errors = check_queues(self.profile)
        if errors:
            raise ProfileError("\n".join(errors))
        overcommit = self.profile.overcommit
        if (state.cpu_factor, state.mem_factor) != (overcommit.cpu, overcommit.memory):
            state.set_overcommit(overcommit.cpu, overcommit.memory)
        self.quotas = QuotaTree(self.profile.queues)
        self.ledger = Ledger()
        self.jobs: dict[str, JobRecord] = {}
        #: grows whenever capacity may have grown (release, node added, device healthy)
        self.capacity_epoch = 0
        #: the one job allowed to hold part of its gang (so gangs never deadlock)
        self.holder: str | None = None
        #: victim id -> the job that preempted it, while the victim is stopping
        self._nominations: dict[str, str] = {}
        #: jobs not in a terminal state, in arrival order
        self._live: dict[str, JobRecord] = {}
        #: maximum runtime and maximum pending time, due first
        self.deadlines = Deadlines()
        #: jobs that preempted others and have not started yet, by id
        self.promised: dict[str, JobRecord] = {}
        self._seq = 0
        #: the time of the last ``handle`` call
        self.now = 0.0
        #: the actions of the ``handle`` call in progress, in the order they are taken
        self._out: list[Action] = []
        # plugins read the ledger and quotas through the handle, so they come first
        self.framework = Framework(self.profile, handle=self, seed=seed, registry=registry)
        #: the queue sort is strict: a job that cannot start blocks the rest of its queue
        self.strict = bool(getattr(self.framework.queue_sort, "strict", False))
        #: jobs with tasks to place (pending, or running with tasks still to start),
        #: indexed by why they wait and where they stand
        self.queue = WaitingQueue(self)
        #: cycles merge the queue's lanes and visit only the jobs that can matter; off,
        #: they sort and visit every waiting job (the reference the merge is checked
        #: against; queue sorts without lanes always use it)
        self.incremental = True
        #: what a driver may read between calls
        self.view = SchedulerView(self)

    def use_reference_cycle(self) -> None:
        """Run every cycle with the full sort over all waiting jobs (see ``incremental``):
        for tests and benchmarks that compare both. Decisions are the same."""
        self.incremental = False

    # -- the one entry point -------------------------------------------------------------

    def handle(self, events: Iterable[Event], now: float) -> list[Action]:
        self.now = now
        self.ledger.advance(now, self.state)
        out = self._out = []
        for event in events:
            self._apply(event, now)
        self._timers(now)
        start = len(out)
        run_cycle(self, now)
        placed_in_line(self, out, start)
        self._out = []
        return out

    def emit(self, action: Action) -> None:
        """Add an action to the answer of the ``handle`` call in progress."""
        self._out.append(action)

    def restore(
        self,
        job: Job,
        run: int,
        placements: Mapping[int, Placement],
        finished: Iterable[int] = (),
        restarts: int = 0,
        started: float | None = None,
        now: float = 0.0,
    ) -> JobRecord:
        """Take back a job that was running before the driver restarted, on its recorded
        placements, without a new scheduling decision.

        Allocates under the core's own task keys and charges the usage ledger (quotas, fair
        share); raises AllocationError and changes nothing if a placement does not fit or
        the job could never have been admitted (unknown queue, past a hard limit). Emits no
        action: the driver knows the job already (its history says "restored").
        """
        if job.id in self.jobs:
            raise ValueError(f"job {job.id} is already in the core")
        problem = self.quotas.submit_error(job)
        if problem is not None:
            raise AllocationError(f"job {job.id}: {problem}")
        if job.best_effort:
            self.state.best_effort_jobs.add(job.id)
        taken: list[TaskKey] = []
        try:
            for task, placement in sorted(placements.items()):
                key = TaskKey(job.id, task, run)
                self.allocate(key, placement, job)
                taken.append(key)
        except AllocationError:
            for key in reversed(taken):
                self.unallocate(key)
            self.state.best_effort_jobs.discard(job.id)
            raise
        record = JobRecord(job, self._seq, queued_since=job.submit_time)
        self._seq += 1
        self.jobs[job.id] = record
        record.move(JobState.PENDING, job.submit_time, "submitted")
        record.run = run
        record.restarts = restarts
        record.placements = dict(placements)
        record.finished = set(finished)
        record.started = now if started is None else started
        usage: Mapping[str, int] = self.ledger.by_job.get(job.id, {})
        record.borrowing = self.quotas.borrowing(
            job.queue, self.ledger, {f for f, a in usage.items() if a > 0}
        )
        record.move(JobState.RUNNING, now, f"run {run}: restored after a restart")
        self._live[job.id] = record
        if record.has_unplaced:
            self.queue.add(record)
        self.deadlines.run_started(record, self._max_runtime(job))
        return record

    # -- what plugins read (SchedulerHandle) ---------------------------------------------

    @property
    def cluster(self) -> ClusterState:
        return self.state

    @property
    def usage(self) -> UsageView:
        return self.ledger

    def queue_weight(self, queue: str) -> float:
        return self.quotas.weight(queue)

    def track_usage(self, by: str, half_life_s: float) -> DecayedView:
        return self.ledger.track(by, half_life_s)

    def job(self, job_id: str) -> JobRecord | None:
        return self.jobs.get(job_id)

    # -- queries -------------------------------------------------------------------------

    def record(self, job_id: str) -> JobRecord:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise KeyError(f"unknown job {job_id!r}") from None

    @property
    def promising(self) -> bool:
        """Some job preempted others and has not started yet (capacity is kept for it)."""
        return bool(self.promised)

    def promise(self, record: JobRecord, promised: bool) -> None:
        """Mark that capacity is kept for ``record`` (it preempted jobs), or no longer."""
        record.promised = promised
        if promised:
            self.promised[record.id] = record
        else:
            self.promised.pop(record.id, None)

    def why(self, job_id: str) -> Explanation:
        """The job's explanation plus what a cycle does not compute for every job: which
        running jobs must finish (and when it would then fit), and which the preemption
        plugin would preempt for it now. A what-if over the cluster: call it on request."""
        from hetsched.scheduler.why import why

        return why(self, job_id)

    def active_jobs(self) -> list[JobRecord]:
        """Jobs not in a terminal state (pending or running), in arrival order."""
        return list(self._live.values())

    def holding_jobs(self) -> list[JobRecord]:
        """Jobs that hold resources (running tasks, tasks being stopped, a gang hold), in
        arrival order: the ledger's jobs, so a long queue of waiting jobs costs nothing
        to whoever looks for victims or for what will finish."""
        return sorted((self.jobs[j] for j in self.ledger.by_job), key=lambda r: r.seq)

    def waiting(self) -> list[JobRecord]:
        """Jobs with tasks to place, in arrival order: pending jobs, and running jobs whose
        gang minimum was below their replicas and that still have tasks to start."""
        self.queue.flush()
        return self.queue.records()

    def position(self, job_id: str) -> tuple[str, int] | None:
        """(leaf queue, place in line): 1 + the pending jobs of its queue that the queue
        order puts ahead of it now; None if the job does not wait."""
        return self.queue.position(self.record(job_id))

    def next_wakeup(self) -> float | None:
        """The earliest time after the last ``handle`` call at which a time-based rule acts
        (gang hold timeout, end of a backoff, maximum runtime, maximum pending time), or
        None. Drivers that do not tick at a fixed step call ``handle([Tick()], t)`` then;
        aging needs no wakeup. Read from heaps and indexes: no scan of the jobs."""
        now = self.now
        times = [self.deadlines.next_after(now), self.queue.next_backoff_end(now)]
        if self.holder is not None:
            hold_since = self.jobs[self.holder].hold_since
            if hold_since is not None:
                times.append(hold_since + self.profile.gang.timeout_s)
        later = [t for t in times if t is not None and t > now]
        return min(later) if later else None

    # -- allocation, kept in step with the usage ledger ----------------------------------

    def allocate(self, key: TaskKey, placement: Placement, job: Job) -> None:
        self.state.allocate(key, placement)
        self.ledger.charge(key, job, placement_usage(self.state, placement))

    def unallocate(self, key: AllocKey) -> None:
        """Undo an allocation made during the same attempt (capacity did not grow)."""
        self.state.release(key)
        self.ledger.refund(key)

    def release(self, key: AllocKey) -> None:
        self.unallocate(key)
        self.capacity_epoch += 1

    # -- events --------------------------------------------------------------------------

    def _apply(self, event: Event, now: float) -> None:
        match event:
            case JobSubmitted(job, run, restarts):
                self._submit(job, run, restarts, now)
            case JobCancelled(job_id, reason):
                self._cancel(job_id, reason, now)
            case TaskFinished(job_id, task, run, succeeded, reason):
                self._finished(TaskKey(job_id, task, run), succeeded, reason, now)
            case TaskStopped(job_id, task, run):
                self._stopped(TaskKey(job_id, task, run))
            case TaskCheckpointed(job_id, task, run):
                record = self.jobs.get(job_id)
                if record is not None and record.run == run and task in record.placements:
                    record.checkpoint = now
            case NodeAdded(node):
                self.state.add_node(node)
                self.capacity_epoch += 1
            case NodeChanged(name, labels, taints):
                self.state.update_node(name, labels, taints)
                self.capacity_epoch += 1
            case NodeRemoved(name, reason):
                keys = self.state.remove_node(name)
                self._lose(keys, f"{reason}: {name}", now)
            case DeviceHealthChanged(device_id, health, reason):
                self._device_health(device_id, health, reason or "unhealthy", now)
            case DeviceAdded(node_name, device):
                if device.id in self.state.device_index:
                    # it went away and came back: the id is known, only its health changes
                    self._device_health(device.id, device.health, "unhealthy", now)
                else:
                    self.state.add_device(node_name, device)
                    self.capacity_epoch += 1
            case Tick():
                pass
            case _:  # pragma: no cover
                raise TypeError(f"unknown event {event!r}")

    def _device_health(self, device_id: str, health: Health, reason: str, now: float) -> None:
        keys = self.state.set_device_health(device_id, health)
        if health is Health.HEALTHY:
            self.capacity_epoch += 1
        else:
            self._lose(keys, f"device {device_id} {reason}", now)

    def _move(
        self,
        record: JobRecord,
        target: JobState,
        now: float,
        cause: str,
        change: Change,
    ) -> None:
        """Change a job's state through the transition table and tell the driver. The
        transition's ``since`` is when the job entered its current state: its queueing
        time while pending, the start of its run while running."""
        source = record.state
        if source is JobState.PENDING:
            since = record.queued_since
        elif source is JobState.RUNNING and record.started is not None:
            since = record.started
        else:
            since = now
        record.move(target, now, cause)
        self._out.append(
            JobTransition(
                record.id, now, source, target, change, cause, record.run, record.restarts, since
            )
        )

    def _submit(self, job: Job, run: int, restarts: int, now: float) -> None:
        if job.id in self.jobs:
            self.emit(Reject(job.id, f"job id {job.id} already exists"))
            return
        record = JobRecord(job, self._seq, queued_since=now, run=run, restarts=restarts)
        self._seq += 1
        self.jobs[job.id] = record
        problem = self.quotas.submit_error(job)
        if problem is not None:
            record.explanation = Explanation(Code.UNRESOLVABLE, problem)
            self._end(record, JobState.REJECTED, now, problem)
            self.emit(Reject(job.id, problem))
            return
        self._move(record, JobState.PENDING, now, "submitted", Change.SUBMITTED)
        self._live[job.id] = record
        self.queue.add(record)
        self.deadlines.queued(record, self.profile.timeouts.max_pending_s)
        if job.best_effort:
            self.state.best_effort_jobs.add(job.id)

    def _end(self, record: JobRecord, state: JobState, now: float, cause: str) -> None:
        """Move a job to a terminal state; it leaves the scans of cycles and timers."""
        self._move(record, state, now, cause, _ENDS[state])
        record.ended = now
        self._live.pop(record.id, None)
        self.state.best_effort_jobs.discard(record.id)
        self.queue.remove(record)

    def _stop_all(self, record: JobRecord, reason: str) -> None:
        """Ask the driver to stop every running task of the current run; the allocations
        stay held, as ``stopping``, until TaskStopped arrives."""
        for task in sorted(record.placements):
            key = TaskKey(record.id, task, record.run)
            record.stopping[key] = record.placements.pop(task)
            self.emit(Kill(record.id, task, record.run, reason))

    def _stopped(self, key: TaskKey) -> None:
        record = self.jobs.get(key.job)
        if record is not None and record.stopping.pop(key, None) is not None:
            self.release(key)
            self._settle(record)

    def _settle(self, victim: JobRecord) -> None:
        """A victim with nothing left to stop no longer delays its preemptor."""
        if not victim.stopping and victim.id in self._nominations:
            preemptor = self.jobs[self._nominations.pop(victim.id)]
            preemptor.nominated.discard(victim.id)
            self.queue.touch(preemptor)

    def _drop_hold(self, record: JobRecord) -> None:
        for task in sorted(record.held):
            self.release(TaskKey(record.id, task, record.run + 1))
        record.held.clear()
        record.hold_since = None
        if self.holder == record.id:
            self.holder = None

    def _end_pending(self, record: JobRecord) -> None:
        """A pending job leaves the queue for good: give back what it holds or was promised."""
        self._drop_hold(record)
        self.promise(record, False)

    def _cancel(self, job_id: str, reason: str, now: float) -> None:
        record = self.jobs.get(job_id)
        if record is None or record.state in TERMINAL:
            return
        self._end_pending(record)
        self._stop_all(record, reason)
        self._end(record, JobState.CANCELLED, now, reason)

    def _finished(self, key: TaskKey, succeeded: bool, reason: str, now: float) -> None:
        record = self.jobs.get(key.job)
        if record is None:
            return
        if key in record.stopping:  # it ended on its own while being stopped
            self._stopped(key)
            return
        task = key.task
        if key.run != record.run or task not in record.placements:
            return  # a stale report: that task holds nothing any more
        del record.placements[task]
        self.release(key)
        if succeeded:
            record.finished.add(task)
            if len(record.finished) == record.job.replicas:
                self._end(record, JobState.SUCCEEDED, now, "all tasks succeeded")
            return
        cause = f"task {task} failed" + (f": {reason}" if reason else "")
        self._stop_all(record, cause)
        job = record.job
        if job.restart_policy is RestartPolicy.ON_FAILURE and record.restarts < job.max_restarts:
            record.restarts += 1
            text = f"{cause}; restart {record.restarts}/{job.max_restarts}"
            self._requeue(record, now, text, Change.RESTARTED)
        else:
            self._end(record, JobState.FAILED, now, cause)

    def _lose(self, keys: list[AllocKey], cause: str, now: float) -> None:
        """Tasks whose node or device went away: free what they held on it, stop the rest
        of their job, and apply the job's ``on_device_failure`` (requeue from scratch,
        requeue to resume from its last checkpoint, or fail). A gang hold on it is dropped
        whole."""
        lost = [k for k in keys if isinstance(k, TaskKey)]
        for key in lost:
            record = self.jobs[key.job]
            if record.stopping.pop(key, None) is not None:
                self.release(key)
                self._settle(record)
                continue
            task = key.task
            if (
                record.state is JobState.PENDING
                and key.run == record.run + 1
                and task in record.held
            ):
                self._drop_hold(record)
                continue
            if record.placements.pop(task, None) is not None:
                self.release(key)
                self.emit(Kill(record.id, task, record.run, cause, released=True))
        for job_id in dict.fromkeys(k.job for k in lost):
            record = self.jobs[job_id]
            if record.state is not JobState.RUNNING:
                continue
            self._stop_all(record, cause)
            policy = record.job.on_device_failure
            if policy is DeviceFailurePolicy.FAIL:
                self._end_pending(record)
                self._end(record, JobState.FAILED, now, f"{cause}; fails by its policy")
            elif policy is DeviceFailurePolicy.CHECKPOINT:
                if record.checkpoint is not None:
                    record.resume_from = record.checkpoint
                if record.resume_from is None:
                    text = f"{cause}; no checkpoint reported, starts from scratch"
                else:
                    text = f"{cause}; resumes from its checkpoint of t={record.resume_from:g}"
                self._requeue(record, now, text, Change.LOST)
            else:
                record.resume_from = None
                self._requeue(record, now, cause, Change.LOST)

    def _requeue(self, record: JobRecord, now: float, cause: str, change: Change) -> None:
        self._move(record, JobState.PENDING, now, cause, change)
        record.finished.clear()
        record.started = None
        record.checkpoint = None
        record.borrowing = False
        record.queued_since = now
        self.queue.add(record)
        self.deadlines.queued(record, self.profile.timeouts.max_pending_s)
        # until the next attempt says more; the job may wait out this call untried
        record.explanation = Explanation(Code.UNSCHEDULABLE, f"back in the queue: {cause}")

    # -- time-based rules ----------------------------------------------------------------

    def _max_runtime(self, job: Job) -> float | None:
        if job.max_runtime_s is not None:
            return job.max_runtime_s
        return self.profile.timeouts.max_runtime_s

    def _timers(self, now: float) -> None:
        """Maximum runtime, gang hold timeout, maximum pending time, in that order (jobs
        of one rule in arrival order).

        Limits come from heaps of deadlines: a call where none is due costs nothing per job.
        """
        for record, limit in self.deadlines.overrun(now):
            cause = "exceeded max runtime"
            self._stop_all(record, cause)
            self._end(record, JobState.FAILED, now, f"{cause} ({limit:g}s)")
        if self.holder is not None:
            record = self.jobs[self.holder]
            hold_since = record.hold_since
            if hold_since is not None and now - hold_since >= self.profile.gang.timeout_s:
                self._gang_timeout(record, now)
        for record, limit in self.deadlines.expired(now):
            self._expire(record, limit, now)

    def _gang_timeout(self, record: JobRecord, now: float) -> None:
        """Release a partial gang hold at its deadline and back the job off, so the next
        gang may hold. A job that preempted others is not backed off: its room is kept by
        its promise, not by the hold, and a backoff would leave that room idle (and break
        the promise that it starts as soon as its victims stop)."""
        gang = self.profile.gang
        held = len(record.held)
        self._drop_hold(record)
        record.gang_timeouts += 1
        self.queue.add(record)  # tried afresh once its backoff ends
        if record.promised:
            then = "its preemption keeps room for it"
        else:
            backoff = min(gang.max_backoff_s, gang.backoff_s * 2 ** (record.gang_timeouts - 1))
            record.backoff_until = now + backoff
            then = f"back in the queue at t={now + backoff:g}"
        text = (
            f"gang timeout: held {held} of {record.job.gang_min} tasks for "
            f"{gang.timeout_s:g}s; released, {then}"
        )
        record.explanation = Explanation(
            Code.UNSCHEDULABLE, text, (f"gang timeouts so far: {record.gang_timeouts}",)
        )
        # logged for the job's story; pending -> pending is not a state change
        record.history.append(Transition(record.id, now, record.state, JobState.PENDING, text))
        self.emit(
            JobTransition(
                record.id,
                now,
                record.state,
                JobState.PENDING,
                Change.GANG_TIMEOUT,
                text,
                record.run,
                record.restarts,
                record.queued_since,
            )
        )

    def _expire(self, record: JobRecord, limit: float, now: float) -> None:
        self._end_pending(record)
        last = record.explanation
        reason = f"pending longer than the maximum of {limit:g}s"
        if last is not None:
            reason += f"; last reason: {last.summary}"
        record.explanation = Explanation(
            Code.UNSCHEDULABLE, reason, tuple(last.lines()[1:]) if last is not None else ()
        )
        self._end(record, JobState.REJECTED, now, reason)
        self.emit(Reject(record.id, reason))

    # -- called by the cycle -------------------------------------------------------------

    def preempt(
        self,
        victim: JobRecord,
        preemptor: JobRecord,
        kind: PreemptionKind,
        grace_s: float,
        now: float,
    ) -> None:
        """Stop the victim's run within ``grace_s`` (its allocations stay held until each
        TaskStopped) and requeue it; the preemptor waits for it."""
        reason = f"preempted by {preemptor.id} ({kind})"
        run = victim.run
        tasks = tuple(sorted(victim.placements))
        for task in tasks:
            victim.stopping[TaskKey(victim.id, task, run)] = victim.placements.pop(task)
        victim.preemptions += 1
        victim.preempted_by.add(preemptor.id)
        preemptor.preempted_jobs.add(victim.id)
        preemptor.nominated.add(victim.id)
        self._nominations[victim.id] = preemptor.id
        self.emit(Preempt(victim.id, run, tasks, grace_s, reason, preemptor.id, kind))
        self._requeue(victim, now, reason, Change.PREEMPTED)
        self._settle(victim)

    def started(self, record: JobRecord) -> None:
        """After :meth:`bind`: the job leaves the queue unless tasks are left to place, and
        a run that started now gets its maximum runtime."""
        if record.state is JobState.RUNNING and record.has_unplaced:
            self.queue.add(record)
        else:
            self.queue.remove(record)
        if record.started == self.now:
            self.deadlines.run_started(record, self._max_runtime(record.job))

    def bind(self, record: JobRecord, placed: list[tuple[int, Placement]], now: float) -> None:
        """Commit an attempt whose placements are allocated (and whose Bind plugins ran)
        already: a new run starts, or a running job whose gang minimum was below its
        replicas starts more tasks."""
        for task, placement in placed:
            record.placements[task] = placement
        record.held.clear()
        record.hold_since = None
        if self.holder == record.id:
            self.holder = None
        self.promise(record, False)
        record.explanation = None
        record.blocked_by = BlockedBy.NONE
        if record.state is not JobState.RUNNING:
            record.run += 1
            record.started = now
            record.checkpoint = None
            usage: Mapping[str, int] = self.ledger.by_job.get(record.id, {})
            record.borrowing = self.quotas.borrowing(
                record.job.queue, self.ledger, {f for f, a in usage.items() if a > 0}
            )
            nodes = sorted({p.node for _, p in placed})
            cause = (
                f"run {record.run}: bound {len(placed)} task(s) to "
                + ", ".join(nodes)
                + (" (borrowing quota)" if record.borrowing else "")
            )
            self._move(record, JobState.RUNNING, now, cause, Change.STARTED)
        self.emit(Bind(record.id, record.run, tuple(placed)))
