"""The engine's event-driven mode: drives the scheduling core on the virtual clock.

The engine is a driver like any other: it feeds :meth:`Scheduler.handle` events and carries
out the actions it returns through the shared :class:`~hetsched.drivers.Interpreter`; what
it reports about jobs comes from the core's JobTransition, Preempt, Pending and Reject
actions. It never reads the core's job book.

- Events that fall on the same virtual time are delivered in one ``handle()`` call, in the
  drivers' one order (:mod:`hetsched.drivers.order`: task reports, cluster changes,
  cancellations, arrivals, ticks), so a run is a pure function of (cluster, workload,
  profile, seed).
- The engine's one loop (:mod:`.loop`) moves the clock; the executor is the virtual clock
  (:mod:`.processes`): a started task exits after the job's true
  duration (from the workload, not the estimate the core may see); a stopped task exits
  after its notice and grace (a Kill: at once), and a task stopped before it finished
  never reports its finish. A job without speed or checkpoint information loses the work
  of a stopped run: it starts from scratch when bound again, and the lost task-seconds
  are counted. A job with them runs on work (:mod:`hetsched.sim.work`): its remaining work
  drops at its speed on the device model it runs on, it keeps what its last checkpoint
  saved (its Bind says which checkpoint it resumes from), saves on a notice when it can,
  reports its checkpoints to the core, and its lost work and checkpointing time are
  counted.
- ``Tick`` is sent every ``tick_s`` of virtual time only while some job waits, so idle
  stretches cost nothing. With ``tick_s`` 0, ticks come instead at the times a core that
  offers ``next_wakeup()`` names (a timeout due while nothing else happens); a core in
  round mode (the profile's ``rounds``) is asked always, so round boundaries come on time
  whatever ``tick_s`` is. When only
  ticks are left and ``idle_ticks`` of them in a row changed nothing, the run ends and the
  jobs still waiting are reported as pending (in round mode, ``idle_ticks`` boundaries: a
  job that arrived just after one waits for the next).

Resource use is accounted from the placements of started tasks, held until the task's exit
is delivered (as the core holds it; at once for a task whose node or device is gone), and
sampled after every step.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np

from hetsched.cluster.state import ClusterState
from hetsched.drivers import EventOrder, Exit, Interpreter, Observer
from hetsched.framework.profile import ProfileSpec
from hetsched.framework.speeds import load_speed_table
from hetsched.keys import TaskKey
from hetsched.model.device import SHARE_UNITS, Node
from hetsched.model.job import Job
from hetsched.model.lifecycle import TERMINAL, JobState
from hetsched.scheduler import (
    Bind,
    Change,
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    JobTransition,
    Kill,
    Migrate,
    NodeAdded,
    NodeRemoved,
    Pending,
    Preempt,
    Reject,
    Scheduler,
    TaskFinished,
    Tick,
)
from hetsched.sim.accounting import Accounts, TimeSeries, device_label
from hetsched.sim.engine.loop import EventLoop
from hetsched.sim.engine.processes import Clock, Running, Stopped, VirtualProcesses
from hetsched.sim.engine.run import ClusterChange, CoreFactory, EngineConfig, Progress, SimResult
from hetsched.sim.network import Slowdown
from hetsched.sim.outcomes import STATE_CODE, JobOutcome, OutcomeTable
from hetsched.sim.work import Due, Work
from hetsched.sim.workload import Workload

__all__ = [
    "ClusterChange",
    "EngineConfig",
    "JobOutcome",
    "SimResult",
    "Simulator",
    "TimeSeries",
    "device_label",
]


#: what the agenda holds: core events, task exits, checkpoints saved on a notice, and
#: ticks (None: periodic, "wakeup": asked for by the core)
_Payload = Event | Exit | Stopped | Due | str | None


class Simulator(VirtualProcesses, Observer):
    """One replay of ``workload`` on ``nodes`` under ``profile``. Call :meth:`run` once.

    ``changes`` inject cluster events (failures, repairs, growth) and ``cancellations``
    (time, job id) pairs; ``progress`` is called every ``config.progress_every`` steps.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        workload: Workload,
        profile: ProfileSpec | None = None,
        seed: int = 0,
        config: EngineConfig | None = None,
        changes: Sequence[ClusterChange] = (),
        cancellations: Sequence[tuple[float, str]] = (),
        progress: Progress | None = None,
        core: CoreFactory = Scheduler,
    ) -> None:
        self.config = config or EngineConfig()
        state = ClusterState(nodes)
        network = self.config.network
        if network is not None:
            state.set_topology(network.levels)
        #: how much slower a gang runs for the network between its tasks (None: no cost)
        self.slowdown = None if network is None else Slowdown(network, nodes)
        self.scheduler = core(state, profile, seed)
        table = load_speed_table(profile.speeds) if profile is not None else None
        if hasattr(self.scheduler, "speed_table"):
            self.scheduler.speed_table = table
        if hasattr(self.scheduler, "keep_ended"):
            self.scheduler.keep_ended = self.config.keep_ended_jobs
        #: work of the jobs that run on work (speed or checkpoint information)
        self.work = Work(nodes, table)
        self._tracked: set[str] = set()
        self.interpreter = Interpreter(Clock(self), self, kill_grace_s=0.0)
        self.workload = workload
        self._progress = progress
        self.loop: EventLoop[_Payload] = EventLoop()
        self._nontick = 0
        self._tick_pending = False
        #: times of ticks asked for by the core's optional ``next_wakeup()``
        self._wakeups: set[float] = set()
        self._rounds = profile is not None and profile.rounds is not None
        #: ticks in a row that changed nothing, and the time of the last call to the core
        self._idle = 0
        self._last = 0.0
        self._init_books(nodes, profile)
        self._init_agenda(changes, cancellations)

    def _init_books(self, nodes: Sequence[Node], profile: ProfileSpec | None) -> None:
        #: job id -> its row in ``outcomes`` (workload order)
        self._rows: dict[str, int] = {}
        self.outcomes = OutcomeTable(len(self.workload.jobs))
        self._waiting: set[str] = set()
        self._running_jobs: set[str] = set()
        #: simulated processes: started and not yet exited, and stopped within their grace
        self._live: dict[TaskKey, Running] = {}
        self._stopping: dict[TaskKey, Running] = {}
        #: rows of the jobs that arrived in the step in progress
        self._arrived: list[int] = []
        self._done = 0
        self.preemptions = 0
        self.migrations = 0
        self.lost_work_s = 0.0
        self.checkpoint_s = 0.0
        self.accounts = Accounts(list(nodes), profile)
        self.series = self.accounts.series
        self.steps = 0
        self.handle_calls = 0
        waits = False
        for item in self.workload.jobs:
            self._add_job(item.job, item.duration_s)
            waits = waits or bool(item.job.after)
        workflow = getattr(self.scheduler, "workflow", None)
        if waits and workflow is not None and not self.config.keep_ended_jobs:
            # ended records are dropped: the ends that later jobs wait for are kept
            workflow.remember = True

    def _init_agenda(
        self, changes: Sequence[ClusterChange], cancellations: Sequence[tuple[float, str]]
    ) -> None:
        # arrivals enter the agenda one at a time, in (submit time, workload order), each
        # with its workload index as tie-break (what it had when all were pushed at once),
        # so the agenda holds what is due soon rather than the whole workload
        self._arrivals = np.argsort(self.outcomes.columns().submit, kind="stable")
        self._next_arrival = 0
        self.loop.seq = len(self.outcomes)
        self._nontick = len(self.outcomes)
        self._push_arrival()
        for change in changes:
            self._push(change.time, EventOrder.CLUSTER, change.event)
        for time, job_id in cancellations:
            self._push(time, EventOrder.CANCEL, JobCancelled(job_id, "cancelled by the workload"))

    @property
    def now(self) -> float:
        """The virtual time of the step in progress (the clock of the engine's loop)."""
        return self.loop.now

    def _add_job(self, job: Job, duration_s: float) -> None:
        if job.id in self._rows:
            raise ValueError(f"duplicate job id {job.id!r} in the workload")
        if self.work.track(job, duration_s):
            self._tracked.add(job.id)
        request = job.resources
        initial, per_class = self.accounts.initial, self.accounts.class_devices
        devices = sum(r.primary.count for r in request.devices) * job.replicas
        shares = [request.cpu_milli * job.replicas / max(initial["cpu"], 1)]
        for r in request.devices:
            wanted = r.primary.count * r.primary.share / SHARE_UNITS * job.replicas
            shares.append(wanted / max(per_class.get(r.primary.device_class, 0), 1))
        self._rows[job.id] = self.outcomes.add_job(
            job.id,
            job.user,
            job.queue,
            job.priority,
            job.replicas,
            devices,
            duration_s,
            job.submit_time,
            max(shares),
        )

    def _push_arrival(self) -> None:
        """Put the next arrival on the agenda (counted in ``_nontick`` from the start)."""
        if self._next_arrival == len(self._arrivals):
            return
        row = int(self._arrivals[self._next_arrival])
        self._next_arrival += 1
        job = self.workload.jobs[row].job
        self.loop.push_keyed(job.submit_time, int(EventOrder.ARRIVAL), row, JobSubmitted(job))

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run to the end (or ``until``); returns the outcome of every job."""
        self.loop.run(self._advance, self.config.until)
        last = self._last
        self.accounts.close(last)
        if self._progress is not None:
            self._progress(self._done, len(self.outcomes), last)
        return SimResult(
            self.outcomes,
            self.series,
            dict(self.accounts.user_integral),
            dict(self.accounts.user_active),
            self.preemptions,
            self.lost_work_s,
            self.steps,
            self.handle_calls,
            last,
            self.accounts.initial,
            self.checkpoint_s,
            self.migrations,
        )

    def _advance(self, time: float) -> bool:
        """The loop's step: deliver what is due at ``time`` to the core in one call; False
        once only idle ticks are left (``idle_ticks`` of them changed nothing)."""
        batch, ticked, woken, delivered = self._pop_batch(time)
        if ticked and not batch and (self._waiting or woken):
            batch.append(Tick())
        if not batch:
            return True  # only stale exits: nothing to tell the core
        self.handle_calls += 1
        self._last = time
        changed = self._step(batch, time)
        if not ticked or delivered or changed:
            self._idle = 0
        elif not (self._rounds and not woken and any(w > time for w in self._wakeups)):
            # (a plain tick before a round boundary that is due tells nothing: the boundary
            # may start what waits, so only boundaries count as idle in round mode)
            self._idle += 1
        if self._nontick == 0 and self._idle >= self.config.idle_ticks:
            return False
        self._schedule_ticks(time)
        return True

    def _pop_batch(self, time: float) -> tuple[list[Event], bool, bool, int]:
        """Everything due at ``time``, in the drivers' order (the heap keeps it): the core
        events, whether a tick or a requested wakeup was due, and how many non-tick
        payloads were delivered."""
        heap = self.loop.heap
        batch: list[Event] = []
        ticked = woken = False
        delivered = 0
        while heap and heap[0][0] == time:
            _, order, _, payload = heapq.heappop(heap)
            if isinstance(payload, Due):
                self._nontick -= 1
                delivered += 1
                event = self._checkpointed(payload, time)
                if event is not None:
                    batch.append(event)
                continue
            if order == EventOrder.TICK:
                if payload is None:
                    self._tick_pending = False
                else:
                    self._wakeups.discard(time)
                    woken = True
                ticked = True
                continue
            self._nontick -= 1
            delivered += 1
            event = self._deliver(payload, time)
            if event is not None:
                batch.append(event)
        if self._tracked:
            # periodic checkpoints written since the last batch, with their times
            reports = [self._checkpointed(due, time) for due in self.work.due(time)]
            batch[:0] = [r for r in reports if r is not None]
        return batch, ticked, woken, delivered

    def _checkpointed(self, due: Due, now: float) -> Event | None:
        return self.interpreter.checkpointed(due.key, now, progress=due.progress, at=due.at)

    def _step(self, batch: list[Event], time: float) -> bool:
        """One core call and its actions; True if any changed what runs."""
        actions = self.scheduler.handle(batch, time)
        self.interpreter.carry_out(actions, time)
        present = self.accounts.users_present()
        contenders = self.outcomes.contenders
        for row in self._arrived:  # users in the system once the batch is in
            contenders[row] = present
        self._arrived.clear()
        self.steps += 1
        self.accounts.sample(time, len(self._waiting), len(self._running_jobs))
        if self._progress is not None and self.steps % self.config.progress_every == 0:
            self._progress(self._done, len(self.outcomes), time)
        return any(type(action) in _CHANGES for action in actions)

    def _schedule_ticks(self, time: float) -> None:
        # the core's wakeup query scans its live jobs, so it is asked only when it is the
        # sole source of ticks; periodic ticks cover timeouts to within tick_s. Round
        # boundaries must come on time, so a core in round mode is always asked
        wake = None if self.config.tick_s and not self._rounds else self._core_wakeup()
        if wake is not None and wake > time and wake not in self._wakeups:
            self._wakeups.add(wake)
            self._push(wake, EventOrder.TICK, "wakeup")
        if self.config.tick_s and self._waiting and not self._tick_pending:
            self._tick_pending = True
            self._push(time + self.config.tick_s, EventOrder.TICK, None)

    def _core_wakeup(self) -> float | None:
        """The core's next time-based action, if it offers ``next_wakeup()`` (optional)."""
        wakeup = getattr(self.scheduler, "next_wakeup", None)
        if not callable(wakeup):
            return None
        value = wakeup()
        return None if value is None else float(value)

    def _push(self, time: float, order: EventOrder, payload: _Payload) -> None:
        if order != EventOrder.TICK:
            self._nontick += 1
        self.loop.push(time, int(order), payload)

    # -- events in -----------------------------------------------------------------------

    def _deliver(self, payload: _Payload, now: float) -> Event | None:
        """Book-keep something due now; returns the core event, or None (a stale exit)."""
        match payload:
            case Exit(key):
                running = self._live.pop(key, None)
                if running is None:
                    return None  # stopped before it could finish: that process is gone
                self.accounts.use(running.placement, running.user, -1, now)
                row = self._rows[key.job]
                if key.job in self._tracked:
                    writing = self.work.finished(key, now)
                    self.checkpoint_s += writing
                    self.outcomes.checkpoint_s[row] += writing
                event = self.interpreter.report(payload)
                if isinstance(event, TaskFinished) and event.succeeded:
                    self.outcomes.finished_in_run[row] += 1
                return event
            case Stopped(key, reason):
                running = self._stopping.pop(key, None)
                if running is not None:
                    self.accounts.use(running.placement, running.user, -1, now)
                return self.interpreter.report(Exit(key, False, reason))
            case JobSubmitted(job):
                self.accounts.user_enter(job.user, now)
                self._arrived.append(self._rows[job.id])
                self._push_arrival()
                return payload
            case JobCancelled():
                return payload
            case NodeAdded(node):
                self.accounts.add_capacity(node)
                return payload
            case NodeRemoved(name):
                self.accounts.remove_capacity(name)
                return payload
            case DeviceHealthChanged(device_id, health):
                self.accounts.health(device_id, health)
                return payload
        raise TypeError(f"unknown payload {payload!r}")  # pragma: no cover

    # -- the observer: what the core says about jobs -------------------------------------

    def transitioned(self, change: JobTransition) -> None:
        table, row = self.outcomes, self._rows[change.job_id]
        table.state[row] = STATE_CODE[change.target]
        table.run[row] = change.run
        if change.change in _TOLD:
            table.set_reason(row, change.cause)
        job_id, now = change.job_id, change.time
        if change.target is JobState.RUNNING:
            table.finished_in_run[row] = 0
            table.last_start[row] = now
            if math.isnan(table.first_start[row]):
                table.first_start[row] = now
            self._waiting.discard(job_id)
            self._running_jobs.add(job_id)
        elif change.target is JobState.PENDING:
            if change.change in (Change.LOST, Change.RESTARTED):
                table.restarts[row] += 1
            self._running_jobs.discard(job_id)
            self._waiting.add(job_id)
        elif change.target in TERMINAL:
            table.end[row] = now
            self._waiting.discard(job_id)
            self._running_jobs.discard(job_id)
            self._done += 1
            self.accounts.user_leave(table.users.names[table.user[row]], now)
            if job_id in self._tracked:
                self.work.forget(job_id)

    def pending(self, action: Pending) -> None:
        row = self._rows.get(action.job_id)
        if row is not None:
            self.outcomes.set_reason(row, action.explanation.summary)

    def rejected(self, action: Reject) -> None:
        row = self._rows.get(action.job_id)
        if row is not None:
            self.outcomes.set_reason(row, action.reason)

    def preempted(self, action: Preempt) -> None:
        self.outcomes.preemptions[self._rows[action.job_id]] += 1
        self.preemptions += 1

    def migrating(self, action: Migrate) -> None:
        self.outcomes.migrations[self._rows[action.job_id]] += 1
        self.migrations += 1


#: actions that change what runs (a step with none of them is idle)
#: actions that change what runs (a step with none of them is idle)
_CHANGES = frozenset({Bind, Kill, Preempt, Migrate, Reject})

#: transitions whose cause becomes the job's reason (a pending job's reason comes from
#: its Pending explanation)
_TOLD = frozenset({Change.LOST, Change.RESTARTED, Change.FAILED, Change.REJECTED, Change.CANCELLED})
