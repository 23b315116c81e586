"""A small discrete-event driver for scenario tests.

A heap of (time, event). Every batch of events at one time goes to ``Scheduler.handle`` in
one call; the actions come back as later events: a Bind becomes a TaskFinished per task
after the job's duration, a Kill a TaskStopped after ``kill_delay_s``, a Preempt a
TaskStopped per task after its grace. Ticks come every ``tick_s`` and at the core's
``next_wakeup()``. Everything the core said is logged for the assertions.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hetsched.cluster.placement import Placement
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Action,
    Bind,
    Event,
    JobSubmitted,
    Kill,
    Pending,
    Preempt,
    Reject,
    Scheduler,
    TaskFinished,
    TaskStopped,
    Tick,
)

__all__ = ["Harness", "Interval"]


@dataclass(frozen=True, slots=True)
class Interval:
    """A task of a run that held devices from ``start`` to ``end``."""

    job_id: str
    task: int
    run: int
    start: float
    end: float
    devices: float


@dataclass(slots=True)
class Harness:
    core: Scheduler
    #: seconds a job's tasks run once bound (default: its estimated runtime, else 1)
    duration: Callable[[Job], float] = lambda j: j.estimated_runtime_s or 1.0
    tick_s: float | None = None
    kill_delay_s: float = 0.0
    #: called after every ``handle`` call with its time, for invariants over time
    after: Callable[[float], None] | None = None
    #: after every call, assert that each pending or rejected job has an explanation
    check_explanations: bool = True
    log: list[tuple[float, Action]] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    now: float = 0.0
    _heap: list[tuple[float, int, Event]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    #: (job, task, run) -> (start, devices) for tasks the driver is running
    _running: dict[tuple[str, int, int], tuple[float, float]] = field(default_factory=dict)
    _ticks: set[float] = field(default_factory=set)

    def at(self, time: float, event: Event) -> None:
        heapq.heappush(self._heap, (time, next(self._seq), event))

    def submit(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            self.at(job.submit_time, JobSubmitted(job))

    def run(self, until: float) -> None:
        """Process events up to ``until`` (inclusive)."""
        if self.tick_s is not None:
            t = 0.0
            while t <= until:
                self._tick(t)
                t += self.tick_s
        while self._heap and self._heap[0][0] <= until:
            time = self._heap[0][0]
            batch: list[Event] = []
            while self._heap and self._heap[0][0] == time:
                _, _, event = heapq.heappop(self._heap)
                if self._live(event):
                    batch.append(event)
            if not batch:
                continue
            self.now = time
            for event in batch:
                self._account(event, time)
            actions = self.core.handle(batch, time)
            for action in actions:
                self._carry_out(action, time)
            if self.check_explanations:
                for record in self.core.jobs.values():
                    if record.state in (JobState.PENDING, JobState.REJECTED):
                        assert record.explanation is not None, record.id
                        assert record.explanation.summary, record.id
            if self.after is not None:
                self.after(time)
            wake = self.core.next_wakeup()
            if wake is not None and wake > time:
                self._tick(wake)

    def _tick(self, time: float) -> None:
        if time not in self._ticks:
            self._ticks.add(time)
            self.at(time, Tick())

    def _live(self, event: Event) -> bool:
        # a finish report for a task the driver already stopped never happens
        if isinstance(event, TaskFinished):
            return (event.job_id, event.task, event.run) in self._running
        return True

    def _account(self, event: Event, time: float) -> None:
        if isinstance(event, TaskFinished | TaskStopped):
            key = (event.job_id, event.task, event.run)
            started = self._running.pop(key, None)
            if started is not None:
                self.intervals.append(Interval(*key, started[0], time, started[1]))

    def _carry_out(self, action: Action, time: float) -> None:
        self.log.append((time, action))
        match action:
            case Bind(job_id, run, placements):
                job = self.core.record(job_id).job
                for task, placement in placements:
                    self._running[(job_id, task, run)] = (time, _devices(placement))
                    self.at(time + self.duration(job), TaskFinished(job_id, task, run))
            case Kill(job_id, task, run, _):
                if (job_id, task, run) in self._running:
                    self.at(time + self.kill_delay_s, TaskStopped(job_id, task, run))
            case Preempt(job_id, run, grace_s, _):
                for j, task, r in list(self._running):
                    if j == job_id and r == run:
                        self.at(time + grace_s, TaskStopped(job_id, task, run))
            case Reject() | Pending():
                pass

    # -- measures --------------------------------------------------------------------------

    def actions(self, kind: type[Action]) -> list[tuple[float, Action]]:
        return [(t, a) for t, a in self.log if isinstance(a, kind)]

    def busy_device_seconds(self, until: float) -> float:
        total = sum((min(i.end, until) - i.start) * i.devices for i in self.intervals)
        total += sum(
            (until - start) * devices for start, devices in self._running.values() if start < until
        )
        return total


def _devices(placement: Placement) -> float:
    return sum(d.share for d in placement.devices) / 1000.0
