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

The books (records, allocations kept in step with the usage ledger, transitions) are the
:class:`~hetsched.scheduler.jobbook.JobBook` the Scheduler extends.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from hetsched.cluster.state import AllocKey, ClusterState
from hetsched.framework.handle import DecayedView, UsageView
from hetsched.framework.profile import ProfileSpec
from hetsched.framework.registry import Registry
from hetsched.framework.runtime import Framework
from hetsched.framework.status import Code
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.device import Health
from hetsched.model.job import DeviceFailurePolicy, Job, RestartPolicy
from hetsched.model.lifecycle import TERMINAL, JobState, Transition
from hetsched.queueing.waiting import WaitingQueue
from hetsched.scheduler.actions import (
    Action,
    Change,
    JobTransition,
    Kill,
    Reject,
)
from hetsched.scheduler.checkpoints import keep_all, note_checkpoint
from hetsched.scheduler.consolidate import run_consolidation
from hetsched.scheduler.cycle import placed_in_line, run_cycle
from hetsched.scheduler.elastic import grow_elastic
from hetsched.scheduler.events import (
    DeviceAdded,
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    StartFailed,
    TaskCheckpointed,
    TaskFinished,
    TaskStopped,
    Tick,
)
from hetsched.scheduler.explain import Explanation
from hetsched.scheduler.jobbook import JobBook
from hetsched.scheduler.migration import run_upgrades
from hetsched.scheduler.records import JobRecord
from hetsched.scheduler.view import SchedulerView

if TYPE_CHECKING:
    from hetsched.scheduler.round_mode import RoundBook

__all__ = ["Scheduler"]


class Scheduler(JobBook):
    """The core: events in, actions out (see the module docstring); its books are a
    :class:`JobBook`."""

    def __init__(
        self,
        state: ClusterState,
        profile: ProfileSpec | None = None,
        seed: int = 0,
        registry: Registry | None = None,
    ) -> None:
        super().__init__(state, profile)
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
        #: what the last grow pass saw (see ``_grow``)
        self._grow_mark: tuple[int, int, int] | None = None
        #: round-based allocation (the profile's ``rounds``), None when off
        self.rounds: RoundBook | None = None
        if self.profile.rounds is not None:
            # round mode brings in the round policies and their solvers (hetsched.rounds):
            # imported only by a profile that has a ``rounds`` section
            from hetsched.scheduler.round_mode import RoundBook

            self.rounds = RoundBook(self.profile.rounds, seed)

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
        if self.rounds is not None:
            from hetsched.scheduler.round_mode import run_rounds

            run_rounds(self, self.rounds, now)
        workflow = self.workflow
        if workflow.active:
            workflow.settle(self, now)
        run_cycle(self, now)
        if workflow.active:
            # elements started and more were created: a cycle may start those too
            while workflow.settle(self, now):
                run_cycle(self, now)
        if self.elastic and self.rounds is None:  # in round mode the rounds size jobs
            self._grow(now)
        run_upgrades(self, now)
        run_consolidation(self, now)
        placed_in_line(self, out, start)
        self._out = []
        return out

    def _grow(self, now: float) -> None:
        """The grow pass, when something it depends on may have changed since the last:
        capacity freed, a job submitted, or a job ended (a waiting job that starts frees
        nothing, but it could start only once capacity was freed)."""
        mark = (self.capacity_epoch, self._seq, len(self._live))
        if mark != self._grow_mark:
            grow_elastic(self, now, self.profile.migration.grace_s)
            self._grow_mark = (self.capacity_epoch, self._seq, len(self._live))

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

    def why(self, job_id: str) -> Explanation:
        """The job's explanation plus what a cycle does not compute for every job: which
        running jobs must finish (and when it would then fit), and which the preemption
        plugin would preempt for it now. A what-if over the cluster: call it on request."""
        from hetsched.scheduler.why import why

        return why(self, job_id)

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
        (gang hold timeout, end of a backoff, maximum runtime, maximum pending time, the
        next try of a waiting job that preemption or defragmentation may help, the next
        round boundary in round mode), or None.
        Drivers that do not tick at a fixed step call ``handle([Tick()], t)`` then; aging
        needs no wakeup. Read from heaps and indexes: no scan of the jobs."""
        now = self.now
        times = [
            self.deadlines.next_after(now),
            self.queue.next_backoff_end(now),
            self.queue.next_refiling(now),
            self.rounds.wakeup() if self.rounds is not None else None,
        ]
        if self.holder is not None:
            hold_since = self.jobs[self.holder].hold_since
            if hold_since is not None:
                times.append(hold_since + self.profile.gang.timeout_s)
        later = [t for t in times if t is not None and t > now]
        return min(later) if later else None

    # -- events --------------------------------------------------------------------------

    def _apply(self, event: Event, now: float) -> None:
        if type(event) is JobSubmitted:  # the most common event, without the match below
            self._submit(
                event.job, event.run, event.restarts, now, event.queued_since, event.checkpoint
            )
            return
        match event:
            case JobSubmitted(job, run, restarts, queued_since, checkpoint):
                self._submit(job, run, restarts, now, queued_since, checkpoint)
            case JobCancelled(job_id, reason):
                self._cancel(job_id, reason, now)
            case TaskFinished(job_id, task, run, succeeded, reason):
                self._finished(TaskKey(job_id, task, run), succeeded, reason, now)
            case TaskStopped(job_id, task, run):
                self._stopped(TaskKey(job_id, task, run))
            case StartFailed(job_id, run, reason, backoff_s):
                self._start_failed(job_id, run, reason, backoff_s, now)
            case TaskCheckpointed():
                reported = self.jobs.get(event.job_id)
                if reported is not None:
                    note_checkpoint(reported, event, now)
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

    def _submit(
        self,
        job: Job,
        run: int,
        restarts: int,
        now: float,
        queued_since: float | None = None,
        checkpoint: SavedCheckpoint | None = None,
    ) -> None:
        if job.id in self.jobs:
            self.emit(Reject(job.id, f"job id {job.id} already exists"))
            return
        since = now if queued_since is None else min(queued_since, now)
        record = JobRecord(job, self._seq, queued_since=since, run=run, restarts=restarts)
        record.checkpoint = checkpoint  # its next run resumes from it
        self._seq += 1
        self.jobs[job.id] = record
        # quotas off: nothing to check, and the request's usage is not worked out for it
        quotas = self.quotas
        problem = (
            quotas.submit_error(job, self.request_of(job, job.gang_min)) if quotas.enabled else None
        )
        if problem is not None:
            record.explanation = Explanation(Code.UNRESOLVABLE, problem)
            self._end(record, JobState.REJECTED, now, problem)
            self.emit(Reject(job.id, problem))
            return
        self._move(record, JobState.PENDING, now, "submitted", Change.SUBMITTED)
        if (job.after or job.array is not None) and self.workflow.hold(self, record, now):
            return  # it waits for other jobs, or it is an array's record
        self._enter(record)

    def _enter(self, record: JobRecord) -> None:
        """A pending job enters the queue (at its submission, or once its dependencies are
        met): it counts, it is ordered, its maximum pending time runs."""
        self._live[record.id] = record
        if record.job.elastic:
            self.elastic[record.id] = record
        self.tally.entered(record)
        self.queue.add(record)
        self.deadlines.queued(record, self.profile.timeouts.max_pending_s)
        self.tally.queued(record)
        if record.job.best_effort:
            self.state.best_effort_jobs.add(record.id)

    def _cancel(self, job_id: str, reason: str, now: float) -> None:
        record = self.jobs.get(job_id)
        if record is None and self.workflow.arrays:
            self.workflow.cancel_element(self, job_id, reason, now)
            return
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
            if len(record.finished) == record.count:
                self._end(record, JobState.SUCCEEDED, now, "all tasks succeeded")
            return
        cause = f"task {task} failed" + (f": {reason}" if reason else "")
        keep_all(record, now)
        self._stop_all(record, cause)
        job = record.job
        if job.restart_policy is RestartPolicy.ON_FAILURE and record.restarts < job.max_restarts:
            record.restarts += 1
            text = f"{cause}; restart {record.restarts}/{job.max_restarts}"
            self._requeue(record, now, text, Change.RESTARTED)
        else:
            self._end(record, JobState.FAILED, now, cause)

    def _start_failed(
        self, job_id: str, run: int, reason: str, backoff_s: float, now: float
    ) -> None:
        """The run could not start as a whole: stop what it holds and requeue the job,
        backed off, as it was before the run (no restart counted)."""
        record = self.jobs.get(job_id)
        if record is None or record.state is not JobState.RUNNING or record.run != run:
            return
        cause = f"run {run} could not start" + (f": {reason}" if reason else "")
        self._stop_all(record, cause)
        self._requeue(record, now, cause, Change.START_FAILED)
        record.backoff_until = now + backoff_s

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
            if key.run == record.run + 1 and task in record.moving:
                self._drop_move(record)
                self._requeue(record, now, f"{cause}: where it was moving to", Change.LOST)
                continue
            if record.placements.pop(task, None) is not None:
                self.release(key)
                self.emit(Kill(record.id, task, record.run, cause, released=True))
        for job_id in dict.fromkeys(k.job for k in lost):
            record = self.jobs[job_id]
            if record.state is not JobState.RUNNING:
                continue
            keep_all(record, now)
            self._stop_all(record, cause)
            policy = record.job.on_device_failure
            if policy is DeviceFailurePolicy.FAIL:
                self._end_pending(record)
                self._end(record, JobState.FAILED, now, f"{cause}; fails by its policy")
            elif policy is DeviceFailurePolicy.CHECKPOINT:
                if record.checkpoint is None:
                    text = f"{cause}; no checkpoint reported, starts from scratch"
                else:
                    text = f"{cause}; resumes from its checkpoint of {record.checkpoint.describe()}"
                self._requeue(record, now, text, Change.LOST)
            else:
                record.checkpoint = None
                self._requeue(record, now, cause, Change.LOST)

    # -- time-based rules ----------------------------------------------------------------

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
