"""A small discrete-event driver for scenario tests.

A heap of (time, event or exit). Every batch of events at one time goes to
``Scheduler.handle`` in one call, in the drivers' one order (``hetsched.drivers.in_order``);
the actions are carried out by the shared interpreter, whose executor here schedules each
task's end: a started task exits after the job's duration, a stopped one after its grace
(``kill_delay_s`` for a Kill). Ticks come every ``tick_s`` and at the core's
``next_wakeup()``. Everything the core said is logged for the assertions.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from hetsched.cluster.placement import Placement
from hetsched.drivers import Exit, Interpreter, Start, Stop, in_order
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Action, Event, JobSubmitted, Scheduler, Tick

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
    _heap: list[tuple[float, int, Event | Exit]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    #: task -> (start, devices) for tasks the executor is running
    _running: dict[TaskKey, tuple[float, float]] = field(default_factory=dict)
    _jobs: dict[str, Job] = field(default_factory=dict)
    _ticks: set[float] = field(default_factory=set)
    _interpreter: Interpreter | None = None

    def __post_init__(self) -> None:
        self._interpreter = Interpreter(self, kill_grace_s=self.kill_delay_s)

    def at(self, time: float, event: Event | Exit) -> None:
        heapq.heappush(self._heap, (time, next(self._seq), event))

    def submit(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            self.at(job.submit_time, JobSubmitted(job))

    def run(self, until: float) -> None:
        """Process events up to ``until`` (inclusive)."""
        assert self._interpreter is not None
        if self.tick_s is not None:
            t = 0.0
            while t <= until:
                self._tick(t)
                t += self.tick_s
        while self._heap and self._heap[0][0] <= until:
            time = self._heap[0][0]
            batch: list[Event] = []
            while self._heap and self._heap[0][0] == time:
                _, _, item = heapq.heappop(self._heap)
                event = self._deliver(item, time)
                if event is not None:
                    batch.append(event)
            if not batch:
                continue
            self.now = time
            actions = self.core.handle(in_order(batch), time)
            self.log.extend((time, a) for a in actions)
            self._interpreter.carry_out(actions, time)
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

    def _deliver(self, item: Event | Exit, time: float) -> Event | None:
        assert self._interpreter is not None
        if isinstance(item, JobSubmitted):
            self._jobs[item.job.id] = item.job
        if not isinstance(item, Exit):
            return item
        if item.key not in self._running:
            return None  # the process is gone already (stopped before it finished)
        started, devices = self._running.pop(item.key)
        self.intervals.append(Interval(*item.key, started, time, devices))
        return self._interpreter.report(item)

    # -- the executor the interpreter drives -----------------------------------------------

    def start(self, tasks: Sequence[Start], now: float) -> None:
        for start in tasks:
            self._running[start.key] = (now, _devices(start.placement))
            self.at(now + self.duration(self._jobs[start.key.job]), Exit(start.key))

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        for stop in tasks:
            self.at(now + stop.grace_s, Exit(stop.key, False, "stopped"))

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
