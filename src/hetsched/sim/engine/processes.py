"""The executor of the event-driven mode: simulated processes on the virtual clock.

A started task exits after the job's true duration (from the workload, not the estimate
the core may see), or, for a job that runs on work (:mod:`hetsched.sim.work`), when its
remaining work is done at its speed on the device model it runs on; a stopped task's
process is gone after its notice and grace (a Kill: at once), and a task stopped before it
finished never reports its finish. Resource use is held from the start until the exit is
delivered (at once for a task whose node or device is gone, as the core frees it).

:class:`VirtualProcesses` is the half of the simulator that plays the processes; the
simulator (:class:`~hetsched.sim.engine.event_mode.Simulator`) sets up the books it names
and supplies ``_push``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.cluster.placement import Placement
from hetsched.drivers import EventOrder, Exit, Start, Stop
from hetsched.keys import TaskKey
from hetsched.sim.accounting import Accounts
from hetsched.sim.network import Slowdown
from hetsched.sim.outcomes import OutcomeTable
from hetsched.sim.work import Due, Work

__all__ = ["Clock", "Running", "Stopped", "VirtualProcesses"]


@dataclass(slots=True)
class Running:
    start: float
    placement: Placement
    user: str


@dataclass(frozen=True, slots=True)
class Stopped:
    """A stopped task's process is gone (its grace is over)."""

    key: TaskKey
    reason: str


class VirtualProcesses:
    """Starts and stops simulated tasks (the interpreter's executor, through :class:`Clock`)."""

    # the books shared with the simulator, which sets them up
    work: Work
    accounts: Accounts
    outcomes: OutcomeTable
    lost_work_s: float
    checkpoint_s: float
    slowdown: Slowdown | None
    _tracked: set[str]
    _rows: dict[str, int]
    #: simulated processes: started and not yet exited, and stopped within their grace
    _live: dict[TaskKey, Running]
    _stopping: dict[TaskKey, Running]

    def _push(self, time: float, order: EventOrder, payload: Any) -> None:
        raise NotImplementedError  # pragma: no cover

    def start_tasks(self, tasks: Sequence[Start], now: float) -> None:
        if not tasks:
            return
        first = tasks[0]
        job_id = first.key.job
        row = self._rows[job_id]
        user = self.outcomes.users.names[self.outcomes.user[row]]
        if job_id in self._tracked:
            placements = [t.placement for t in tasks]
            end = self.work.start(first.key, placements, first.resume, now)
        else:
            speed = 1.0 if self.slowdown is None else self.slowdown.factor(placements_of(tasks))
            end = now + self.outcomes.duration_s[row] / speed
        for start in tasks:
            running = Running(now, start.placement, user)
            self._live[start.key] = running
            self.accounts.use(start.placement, user, +1, now)
            if end != math.inf:
                self._push(end, EventOrder.REPORT, Exit(start.key))

    def stop_tasks(self, tasks: Sequence[Stop], now: float) -> None:
        for stop in tasks:
            running = self._live.pop(stop.key, None)
            if running is None:
                if stop.key in self._stopping:
                    # its notice ended early (it checkpointed): the grace runs from now
                    self._push(
                        now + stop.grace_s, EventOrder.REPORT, Stopped(stop.key, stop.reason)
                    )
                continue
            ends = now
            if stop.key.job in self._tracked:
                ends = self._stop_work(stop, now)
            else:
                lost = now - running.start
                self.lost_work_s += lost
                self.outcomes.lost_work_s[self._rows[stop.key.job]] += lost
            if stop.released:
                # the core freed it at once: its node or device is gone
                self.accounts.use(running.placement, running.user, -1, now)
            else:
                self._stopping[stop.key] = running
            self._push(ends + stop.grace_s, EventOrder.REPORT, Stopped(stop.key, stop.reason))

    def _stop_work(self, stop: Stop, now: float) -> float:
        """A tracked task stops: count what its run loses and writes; when its process is
        gone (before its grace): at the end of its notice, or once its notice save is
        written (reported then, which ends the notice for the interpreter)."""
        notice = 0.0 if stop.released else stop.notice_s
        stopped = self.work.stop(stop.key, notice, now)
        if stopped is None:
            return now
        saving, first = stopped
        row = self._rows[stop.key.job]
        self.lost_work_s += saving.lost_s
        self.outcomes.lost_work_s[row] += saving.lost_s
        self.checkpoint_s += saving.writing_s
        self.outcomes.checkpoint_s[row] += saving.writing_s
        if first and saving.on_notice and notice > 0:
            self._push(saving.time, EventOrder.REPORT, Due(stop.key, saving.work, saving.time))
        return now + notice


def placements_of(tasks: Sequence[Start]) -> list[Placement]:
    return [t.placement for t in tasks]


@dataclass(frozen=True, slots=True)
class Clock:
    """The simulator as the interpreter's executor (:mod:`hetsched.drivers.executor`): a
    task's end is an event on the virtual clock, handed to the interpreter when the clock
    reaches it (exits by callback, so :meth:`poll` has none). It has no optional capability
    (a notice is simulated inside :meth:`stop`; there is nothing to adopt or fence)."""

    sim: VirtualProcesses

    def start(self, tasks: Sequence[Start], now: float) -> None:
        self.sim.start_tasks(tasks, now)

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        self.sim.stop_tasks(tasks, now)

    def poll(self, now: float) -> list[Exit]:
        return []

    def shutdown(self) -> None:
        pass
