"""Checkpoints pods report: a new ``hetsched.io/checkpointed`` value on a pod that runs a
task (or is in its preemption notice) is ``TaskCheckpointed`` for the core, through the
interpreter, which ends the pod's notice when it is in one (docs/checkpointing.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from hetsched.drivers import Interpreter
from hetsched.k8s.checkpoints import report, reported
from hetsched.k8s.names import CHECKPOINTED
from hetsched.k8s.podevents import PodEvents
from hetsched.k8s.translate import PodInfo
from hetsched.keys import TaskKey
from hetsched.scheduler import Event

__all__ = ["CheckpointReports"]

log = logging.getLogger(__name__)


class _Stopping(Protocol):
    """What the reports read of the pod executor: the pods asked to stop, and their tasks."""

    stopping: dict[str, TaskKey]


class _Scheduler(Protocol):
    """What the reports read of :class:`hetsched.k8s.scheduler.PodScheduler`."""

    events: PodEvents
    interpreter: Interpreter
    owner: dict[str, tuple[str, int]]

    @property
    def executor(self) -> _Stopping: ...

    def running_run(self, job_id: str) -> int | None: ...


class CheckpointReports:
    """Reads the reports of ``sched``'s pods. ``wall`` is the clock the reports' times are
    in (the scheduler's own may be monotonic)."""

    def __init__(self, sched: _Scheduler, wall: Callable[[], float] = time.time) -> None:
        self.sched = sched
        self.wall = wall
        #: pod key -> the last report value taken from it
        self._seen: dict[str, str] = {}

    def look(self, info: PodInfo, obj: dict[str, Any], now: float, gone: bool) -> list[Event]:
        """The event of a new report on pod ``info`` (none when its value is the one seen
        last, or it runs no task of ours: then it is looked at again on its next change).
        A value that is not a report gets a Warning Event and is ignored until it changes.
        A pod ``gone`` (deleted) is forgotten once its last version is read."""
        events = self._look(info, obj, now)
        if gone:
            self._seen.pop(info.key, None)
        return events

    def _look(self, info: PodInfo, obj: dict[str, Any], now: float) -> list[Event]:
        raw = reported(obj)
        if raw is None or self._seen.get(info.key) == raw:
            return []
        task = self._task(info)
        if task is None:
            return []
        self._seen[info.key] = raw
        try:
            saved = report(raw)
        except ValueError as exc:
            message = f"annotation {CHECKPOINTED}: {exc}; ignored"
            self.sched.events.post(obj, "Warning", "BadCheckpointReport", message)
            return []
        at = None if saved.time is None else now - max(0.0, self.wall() - saved.time)
        event = self.sched.interpreter.checkpointed(task, now, saved.step, saved.path, at=at)
        return [event] if event is not None else []

    def _task(self, info: PodInfo) -> TaskKey | None:
        """The task pod ``info`` runs now: one stopping (in its notice), or one of a run of
        its job that runs on a node."""
        sched = self.sched
        stopping = sched.executor.stopping.get(info.key)
        if stopping is not None:
            return stopping
        owned = sched.owner.get(info.key)
        if owned is None or not info.node_name or info.terminal:
            return None
        run = sched.running_run(owned[0])
        return None if run is None else TaskKey(owned[0], owned[1], run)
