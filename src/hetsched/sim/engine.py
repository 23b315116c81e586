"""The discrete-event engine: drives the scheduling core on a virtual clock.

The engine is a driver like any other: it feeds :meth:`Scheduler.handle` events and carries
out the actions it returns, nothing more. It never reads the core's job book.

- Events that fall on the same virtual time are delivered in one ``handle()`` call, in a
  fixed order (task reports, cluster changes, cancellations, arrivals, ticks), so a run is
  a pure function of (cluster, workload, profile, seed).
- ``Bind`` starts tasks: each reports ``TaskFinished`` after the job's true duration (from
  the workload, not the estimate the core may see). ``Kill`` stops a task at once;
  ``Preempt`` stops every running task of the run after ``grace_s``. Work of a stopped run
  is lost: the job starts from scratch when bound again, and the lost task-seconds are
  counted.
- ``Tick`` is sent every ``tick_s`` of virtual time only while some job waits, so idle
  stretches cost nothing. With ``tick_s`` 0, ticks come instead at the times a core that
  offers ``next_wakeup()`` names (a timeout due while nothing else happens). When only
  ticks are left and ``idle_ticks`` of them in a row changed nothing, the run ends and the
  jobs still waiting are reported as pending.

Resource use is accounted from the placements in Bind actions, held until the task's
finish or stop is delivered (as the core holds it), and sampled after every step.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.cluster.stranding import StrandingMeter
from hetsched.framework.profile import ProfileSpec
from hetsched.model.device import SHARE_UNITS, Health, Node
from hetsched.plugins.stranding import profile_typicals
from hetsched.scheduler import (
    Bind,
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    Kill,
    NodeAdded,
    NodeRemoved,
    Pending,
    Preempt,
    Reject,
    Scheduler,
    TaskFinished,
    TaskStopped,
    Tick,
)
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

_Delivered = Event | TaskStopped

#: builds the core: ``(state, profile, seed) -> Scheduler`` (a test or benchmark may wrap it)
CoreFactory = Callable[[ClusterState, ProfileSpec | None, int], Scheduler]

#: callback ``(finished jobs, total jobs, virtual time)`` for progress bars
Progress = Callable[[int, int, float], None]


class _Order(IntEnum):
    """Delivery order of events at the same virtual time."""

    REPORT = 0  # TaskFinished, TaskStopped
    CLUSTER = 1  # NodeAdded, NodeRemoved, DeviceHealthChanged
    CANCEL = 2
    ARRIVAL = 3
    TICK = 4


@dataclass(frozen=True, slots=True)
class ClusterChange:
    """A cluster event injected at virtual time ``time`` (a failure, a repair, growth)."""

    time: float
    event: NodeAdded | NodeRemoved | DeviceHealthChanged


@dataclass(frozen=True, slots=True)
class EngineConfig:
    #: virtual seconds between ticks while jobs wait (aging, timeouts); 0 or None: no
    #: periodic ticks, only those the core asks for through ``next_wakeup()``
    tick_s: float | None = 60.0
    #: consecutive ticks that change nothing, with no other event left, before giving up
    idle_ticks: int = 60
    #: stop at this virtual time (None: when the workload has drained)
    until: float | None = None
    #: call the progress callback every this many steps
    progress_every: int = 2000


@dataclass(slots=True)
class JobOutcome:
    """What happened to one job, from the engine's side. Times in virtual seconds."""

    job_id: str
    user: str
    queue: str
    priority: int
    tasks: int
    devices: int
    duration_s: float
    submit: float
    #: pending, running, succeeded, rejected or cancelled
    state: str = "pending"
    first_start: float | None = None
    last_start: float | None = None
    end: float | None = None
    run: int = 0
    finished_in_run: int = 0
    preemptions: int = 0
    restarts: int = 0
    #: task-seconds of runs that were stopped before finishing
    lost_work_s: float = 0.0
    #: the last pending explanation (first line) or the reject reason
    reason: str = ""
    #: the job's dominant share of the cluster: max over CPU and its device class of
    #: (what all its tasks ask) / (the cluster's capacity at the start)
    demand_share: float = 0.0
    #: users with jobs in the system just after it arrived (its own included)
    contenders: int = 1

    @property
    def wait_s(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submit

    @property
    def jct_s(self) -> float | None:
        return None if self.end is None or self.state != "succeeded" else self.end - self.submit


@dataclass(slots=True)
class TimeSeries:
    """Samples taken after every step: time, queue length, running jobs, use per resource.

    ``used`` and ``capacity`` map a resource label (``cpu``, or a device model such as
    ``V100``) to values per sample: millicores for CPU, milli-units for devices.
    """

    time: list[float] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    used: dict[str, list[int]] = field(default_factory=dict)
    capacity: dict[str, list[int]] = field(default_factory=dict)
    #: stranded accelerators / healthy accelerators (cluster/stranding.py), per sample
    stranded: list[float] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SimResult:
    jobs: tuple[JobOutcome, ...]
    series: TimeSeries
    #: per user: integral over time of the user's dominant share while it had jobs in the
    #: system, and the length of that time (see metrics.jain_index)
    user_share_integral: dict[str, float]
    user_active_s: dict[str, float]
    preemptions: int
    lost_work_s: float
    steps: int
    handle_calls: int
    end_time: float
    #: resource label -> capacity at the start (millicores or device milli-units)
    initial_capacity: dict[str, int]


def device_label(device_class: str, model: str) -> str:
    """The resource label of a device: its model, or its class when it has none."""
    return model or device_class


@dataclass(slots=True)
class _Running:
    start: float
    placement: Placement
    user: str


class Simulator:
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
        self.scheduler = core(ClusterState(nodes), profile, seed)
        self.workload = workload
        self._progress = progress
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self._nontick = 0
        self._tick_pending = False
        #: times of ticks asked for by the core's optional ``next_wakeup()``
        self._wakeups: set[float] = set()
        self.now = 0.0
        self._duration: dict[str, float] = {}
        self.outcomes: dict[str, JobOutcome] = {}
        self._waiting: set[str] = set()
        self._running_jobs: set[str] = set()
        self._live: dict[tuple[str, int, int], _Running] = {}
        self._stopping: dict[tuple[str, int, int], _Running] = {}
        self._cancelled: set[str] = set()
        self._arrived: list[str] = []
        self._done = 0
        self.preemptions = 0
        self.lost_work_s = 0.0
        # resource accounting
        self._nodes: dict[str, Node] = {}
        self._device_label: dict[str, str] = {}
        self._device_node: dict[str, str] = {}
        self._unhealthy: set[str] = set()
        self._removed: set[str] = set()
        self._used: dict[str, int] = {"cpu": 0}
        self._cap: dict[str, int] = {"cpu": 0}
        self.series = TimeSeries(used={"cpu": []}, capacity={"cpu": []})
        self._stranding = StrandingMeter(typical=profile_typicals(profile))
        for node in nodes:
            self._add_capacity(node)
        self._initial_cap = dict(self._cap)
        class_cap: dict[str, int] = {}
        for node in nodes:
            for device in node.devices:
                class_cap[device.device_class] = class_cap.get(device.device_class, 0) + 1
        # fairness: per-user current use and the integral of the dominant share
        self._user_used: dict[str, dict[str, int]] = {}
        self._user_jobs: dict[str, int] = {}
        self._user_mark: dict[str, float] = {}
        self._user_share: dict[str, float] = {}
        self._user_integral: dict[str, float] = {}
        self._user_active: dict[str, float] = {}
        for item in workload.jobs:
            job = item.job
            if job.id in self._duration:
                raise ValueError(f"duplicate job id {job.id!r} in the workload")
            self._duration[job.id] = item.duration_s
            request = job.resources
            devices = sum(r.primary.count for r in request.devices) * job.replicas
            shares = [request.cpu_milli * job.replicas / max(self._cap["cpu"], 1)]
            for r in request.devices:
                wanted = r.primary.count * r.primary.share / SHARE_UNITS * job.replicas
                shares.append(wanted / max(class_cap.get(r.primary.device_class, 0), 1))
            self.outcomes[job.id] = JobOutcome(
                job.id,
                job.user,
                job.queue,
                job.priority,
                job.replicas,
                devices,
                item.duration_s,
                job.submit_time,
                demand_share=max(shares),
            )
            self._push(job.submit_time, _Order.ARRIVAL, JobSubmitted(job))
        for change in changes:
            self._push(change.time, _Order.CLUSTER, change.event)
        for time, job_id in cancellations:
            self._push(time, _Order.CANCEL, JobCancelled(job_id, "cancelled by the workload"))
        self.steps = 0
        self.handle_calls = 0

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run to the end (or ``until``); returns the outcome of every job."""
        idle = 0
        last = 0.0  # the time of the last call to the core: the end of the run
        until = self.config.until
        heap = self._heap
        while heap:
            time = heap[0][0]
            if until is not None and time > until:
                break
            self.now = time
            batch: list[Any] = []  # core events, TaskStopped included
            ticked = woken = False
            delivered = 0
            while heap and heap[0][0] == time:
                _, order, _, payload = heapq.heappop(heap)
                if order == _Order.TICK:
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
            for job_id in self._arrived:  # users in the system once the batch is in
                self.outcomes[job_id].contenders = len(self._user_mark)
            self._arrived.clear()
            if ticked and not batch and (self._waiting or woken):
                batch.append(Tick())
            if not batch:
                continue  # only stale finishes: nothing to tell the core
            self.handle_calls += 1
            last = time
            actions = self.scheduler.handle(batch, time)
            changed = self._carry_out(actions, time)
            self.steps += 1
            self._sample(time)
            if self._progress is not None and self.steps % self.config.progress_every == 0:
                self._progress(self._done, len(self.outcomes), time)
            idle = idle + 1 if (ticked and not delivered and not changed) else 0
            if self._nontick == 0 and idle >= self.config.idle_ticks:
                break
            # the core's wakeup query scans its live jobs, so it is asked only when it is
            # the sole source of ticks; periodic ticks cover timeouts to within tick_s
            wake = None if self.config.tick_s else self._core_wakeup()
            if wake is not None and wake > time and wake not in self._wakeups:
                self._wakeups.add(wake)
                self._push(wake, _Order.TICK, "wakeup")
            if self.config.tick_s and self._waiting and not self._tick_pending:
                self._tick_pending = True
                self._push(time + self.config.tick_s, _Order.TICK, None)
        self._close_fairness(last)
        if self._progress is not None:
            self._progress(self._done, len(self.outcomes), last)
        return SimResult(
            tuple(self.outcomes.values()),
            self.series,
            dict(self._user_integral),
            dict(self._user_active),
            self.preemptions,
            self.lost_work_s,
            self.steps,
            self.handle_calls,
            last,
            self._initial_cap,
        )

    def _core_wakeup(self) -> float | None:
        """The core's next time-based action, if it offers ``next_wakeup()`` (optional)."""
        wakeup = getattr(self.scheduler, "next_wakeup", None)
        if not callable(wakeup):
            return None
        value = wakeup()
        return None if value is None else float(value)

    def _push(self, time: float, order: _Order, payload: object) -> None:
        if order != _Order.TICK:
            self._nontick += 1
        heapq.heappush(self._heap, (time, int(order), self._seq, payload))
        self._seq += 1

    # -- events in -----------------------------------------------------------------------

    def _deliver(self, payload: object, now: float) -> _Delivered | None:
        """Book-keep an event being delivered; None drops it (a stale finish)."""
        match payload:
            case TaskFinished(job_id, task, run):
                running = self._live.pop((job_id, task, run), None)
                if running is None:
                    return None  # stopped before it could finish
                self._free(running, now)
                outcome = self.outcomes[job_id]
                outcome.finished_in_run += 1
                if outcome.finished_in_run == outcome.tasks:
                    self._finish(outcome, "succeeded", now)
                return payload
            case TaskStopped(job_id, task, run):
                running = self._stopping.pop((job_id, task, run), None)
                if running is not None:
                    self._free(running, now)
                return payload
            case JobSubmitted(job):
                self._waiting.add(job.id)
                self._user_enter(job.user, now)
                self._arrived.append(job.id)
                return payload
            case JobCancelled(job_id):
                target = self.outcomes.get(job_id)
                if target is not None and target.state in ("pending", "running"):
                    self._cancelled.add(job_id)
                    self._finish(target, "cancelled", now)
                return payload
            case NodeAdded(node):
                self._add_capacity(node)
                return payload
            case NodeRemoved(name):
                self._remove_capacity(name)
                return payload
            case DeviceHealthChanged(device_id, health):
                self._health(device_id, health)
                return payload
        raise TypeError(f"unknown payload {payload!r}")  # pragma: no cover

    # -- actions out ---------------------------------------------------------------------

    def _carry_out(self, actions: Sequence[object], now: float) -> bool:
        """Carry out the core's actions; True if any changed what runs."""
        changed = False
        for action in actions:
            match action:
                case Bind(job_id, run, placements):
                    self._bind(job_id, run, placements, now)
                    changed = True
                case Kill(job_id, task, run, reason):
                    self._stop((job_id, task, run), now, 0.0)
                    killed = self.outcomes[job_id]
                    live = job_id not in self._cancelled and killed.state == "running"
                    if live and run == killed.run:
                        # the core requeues a job whose run it kills (a lost node or
                        # device); if it ended the job instead, it stays pending here with
                        # the kill's reason, as no Bind follows
                        killed.restarts += 1
                        killed.reason = reason
                        self._requeue(killed)
                    changed = True
                case Preempt(job_id, run, grace_s):
                    outcome = self.outcomes[job_id]
                    for task in range(outcome.tasks):
                        self._stop((job_id, task, run), now, grace_s)
                    outcome.preemptions += 1
                    self.preemptions += 1
                    if run == outcome.run and outcome.state == "running":
                        self._requeue(outcome)
                    changed = True
                case Reject(job_id, reason):
                    rejected = self.outcomes.get(job_id)
                    if rejected is not None and rejected.state in ("pending", "running"):
                        rejected.reason = reason
                        self._finish(rejected, "rejected", now)
                    changed = True
                case Pending(job_id, explanation):
                    waiting = self.outcomes.get(job_id)
                    if waiting is not None:
                        waiting.reason = explanation.summary
        return changed

    def _bind(
        self, job_id: str, run: int, placements: Sequence[tuple[int, Placement]], now: float
    ) -> None:
        outcome = self.outcomes[job_id]
        if run != outcome.run or outcome.state != "running":
            outcome.run = run
            outcome.finished_in_run = 0
            outcome.state = "running"
            outcome.last_start = now
            if outcome.first_start is None:
                outcome.first_start = now
            self._waiting.discard(job_id)
            self._running_jobs.add(job_id)
        end = now + self._duration[job_id]
        for task, placement in placements:
            running = _Running(now, placement, outcome.user)
            self._live[(job_id, task, run)] = running
            self._use(running, +1)
            self._push(end, _Order.REPORT, TaskFinished(job_id, task, run, True))

    def _stop(self, key: tuple[str, int, int], now: float, grace_s: float) -> None:
        running = self._live.pop(key, None)
        if running is None:
            return
        self.lost_work_s += now - running.start
        self.outcomes[key[0]].lost_work_s += now - running.start
        placement = running.placement
        if placement.node in self._removed or any(
            d.device_id in self._unhealthy for d in placement.devices
        ):
            self._free(running, now)  # the core released it at once: its node is gone
        else:
            self._stopping[key] = running
        self._push(now + grace_s, _Order.REPORT, TaskStopped(*key))

    def _requeue(self, outcome: JobOutcome) -> None:
        outcome.state = "pending"
        outcome.finished_in_run = 0
        self._running_jobs.discard(outcome.job_id)
        self._waiting.add(outcome.job_id)

    def _finish(self, outcome: JobOutcome, state: str, now: float) -> None:
        outcome.state = state
        outcome.end = now
        self._waiting.discard(outcome.job_id)
        self._running_jobs.discard(outcome.job_id)
        self._done += 1
        self._user_leave(outcome.user, now)

    # -- accounting ----------------------------------------------------------------------

    def _add_capacity(self, node: Node) -> None:
        self._nodes[node.name] = node
        self._stranding.add_node(node)
        self._removed.discard(node.name)
        self._cap["cpu"] = self._cap.get("cpu", 0) + node.cpu_milli
        for device in node.devices:
            label = device_label(device.device_class, device.model)
            self._device_label[device.id] = label
            self._device_node[device.id] = node.name
            self._used.setdefault(label, 0)
            if label not in self._cap:
                self._cap[label] = 0
                # a model first seen mid-run had nothing before
                self.series.used[label] = [0] * len(self.series.time)
                self.series.capacity[label] = [0] * len(self.series.time)
            if device.health is Health.HEALTHY:
                self._cap[label] += SHARE_UNITS
            else:
                self._unhealthy.add(device.id)

    def _remove_capacity(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None or name in self._removed:
            return
        self._removed.add(name)
        self._stranding.remove_node(name)
        self._cap["cpu"] -= node.cpu_milli
        for device in node.devices:
            if device.id not in self._unhealthy:
                self._cap[self._device_label[device.id]] -= SHARE_UNITS

    def _health(self, device_id: str, health: Health) -> None:
        label = self._device_label.get(device_id)
        if label is None or self._device_node[device_id] in self._removed:
            return
        self._stranding.set_health(device_id, health is Health.HEALTHY)
        if health is Health.HEALTHY and device_id in self._unhealthy:
            self._unhealthy.discard(device_id)
            self._cap[label] += SHARE_UNITS
        elif health is not Health.HEALTHY and device_id not in self._unhealthy:
            self._unhealthy.add(device_id)
            self._cap[label] -= SHARE_UNITS

    def _use(self, running: _Running, sign: int) -> None:
        placement = running.placement
        used = self._used
        self._stranding.use(placement, sign)
        user = self._user_used.setdefault(running.user, {})
        used["cpu"] += sign * placement.cpu_milli
        user["cpu"] = user.get("cpu", 0) + sign * placement.cpu_milli
        for share in placement.devices:
            label = self._device_label[share.device_id]
            used[label] += sign * share.share
            user[label] = user.get(label, 0) + sign * share.share
        self._user_update(running.user, self.now)

    def _free(self, running: _Running, now: float) -> None:
        self._use(running, -1)

    def _sample(self, now: float) -> None:
        series = self.series
        series.time.append(now)
        series.queued.append(len(self._waiting))
        series.running.append(len(self._running_jobs))
        series.stranded.append(self._stranding.fraction)
        for label, values in series.used.items():
            values.append(self._used[label])
            series.capacity[label].append(self._cap[label])

    # -- fairness: dominant share integrated while a user has jobs in the system ---------

    def _dominant(self, user: str) -> float:
        used = self._user_used.get(user)
        if not used:
            return 0.0
        cap = self._initial_cap
        return max((v / cap[k] for k, v in used.items() if cap.get(k)), default=0.0)

    def _settle(self, user: str, now: float) -> None:
        mark = self._user_mark.get(user)
        if mark is not None:
            span = now - mark
            self._user_integral[user] = (
                self._user_integral.get(user, 0.0) + self._user_share.get(user, 0.0) * span
            )
            self._user_active[user] = self._user_active.get(user, 0.0) + span
        self._user_mark[user] = now

    def _user_enter(self, user: str, now: float) -> None:
        count = self._user_jobs.get(user, 0)
        if count == 0:
            self._user_mark[user] = now
            self._user_integral.setdefault(user, 0.0)
            self._user_active.setdefault(user, 0.0)
            self._user_share[user] = self._dominant(user)
        self._user_jobs[user] = count + 1

    def _user_leave(self, user: str, now: float) -> None:
        count = self._user_jobs.get(user, 0) - 1
        self._user_jobs[user] = count
        if count == 0:
            self._settle(user, now)
            del self._user_mark[user]

    def _user_update(self, user: str, now: float) -> None:
        if user in self._user_mark:
            self._settle(user, now)
        self._user_share[user] = self._dominant(user)

    def _close_fairness(self, now: float) -> None:
        for user in list(self._user_mark):
            self._settle(user, now)
