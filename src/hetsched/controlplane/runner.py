"""The turn loop's seam to where tasks run: a :class:`Runner`.

The loop (``controlplane/loop.py``) owns the core, the store's turn records and the API's
views; a runner owns the executor and what the executor's world reports. Two implement it:

- the process runner (``controlplane/processes.py``): ``hetsched up``'s tasks as processes
  of a process executor (this machine's, or agents on Ray nodes), with the machine's
  watcher, overcommit guard, checkpoint protocol and federations' leases;
- the member runner (``hetsched.federation``): a federation's tasks as jobs on member
  clusters, its nodes the members themselves.

Every method is called from the loop's thread, except :meth:`Runner.bind` (before the loop
starts) and what a runner posts through :meth:`ControlLoop.post` from its own threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hetsched.agent.checkpoints import Report
from hetsched.agent.guard import Guard
from hetsched.agent.watcher import NodeWatcher
from hetsched.cluster.state import ClusterState
from hetsched.controlplane.checkpointing import CheckpointProtocol
from hetsched.controlplane.planner import TurnPlan, TurnPlanner
from hetsched.controlplane.schemas import SubmitSpec
from hetsched.controlplane.storage.store import Store
from hetsched.drivers import Exit
from hetsched.keys import TaskKey
from hetsched.model.device import Device
from hetsched.model.job import Job
from hetsched.scheduler import Event, JobSubmitted
from hetsched.scheduler.view import SchedulerView

__all__ = ["Before", "LoopHandle", "Runner"]


@dataclass(slots=True)
class Before:
    """What a runner brings to a turn besides the API's events: its own events (a node
    fenced, a lease lapsed), task exits it polled, and checkpoint reports."""

    events: list[Event] = field(default_factory=list)
    exits: list[Exit] = field(default_factory=list)
    reports: list[tuple[TaskKey, Report]] = field(default_factory=list)


class LoopHandle(Protocol):
    """What a runner may use of the loop it serves (``ControlLoop``)."""

    store: Store
    lock: threading.Lock
    #: replaced when the core is rebuilt: read it afresh each time
    planner: TurnPlanner

    @property
    def view(self) -> SchedulerView: ...

    def post(self, kind: str, payload: Any) -> None:
        """Something for the next turn, from any thread (read by :meth:`Runner.message`)."""

    def later(self, events: Iterable[Event] = (), exits: Iterable[Exit] = ()) -> None:
        """Events and exits for the next turn, from the loop's thread."""

    def wake(self) -> None:
        """Run a turn soon, from any thread."""

    def device_events(self, events: list[Event]) -> None:
        """Node and device changes from a watcher, from its thread."""


class Runner(Protocol):
    """Where a control plane's tasks run (see the module docstring)."""

    #: the grace between a stop's SIGTERM (or its equivalent) and the kill
    kill_grace_s: float
    #: the tasks die with this host: recording their start need not wait for the disk
    #: (``Store.record_turn``)
    tasks_here: bool
    #: the nodes change between turns (members' reports): the views are refreshed on time,
    #: not only after a turn that planned
    live_views: bool

    @property
    def guard(self) -> Guard | None: ...

    @property
    def watcher(self) -> NodeWatcher | None: ...

    @property
    def checkpoints(self) -> CheckpointProtocol | None: ...

    @property
    def devices(self) -> Mapping[str, Device]: ...

    def bind(self, loop: LoopHandle) -> None:
        """The loop this runner serves (before it starts): the runner posts to it, reads its
        planner and lock, and hands it events for the next turn."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def submission(
        self, row: dict[str, Any], spec: SubmitSpec | None, job: Job | None
    ) -> JobSubmitted:
        """The core's event for a job row the API committed (``spec`` and ``job``: what the
        API validated and built, when it did); the runner learns the job."""
        ...

    def message(self, kind: str, payload: Any, now: float) -> tuple[list[Event], list[Exit]]:
        """Something posted to the loop that is not a submission or a cancel."""
        ...

    def before(self, now: float) -> Before:
        """Called at the start of every turn, after the posts are read."""
        ...

    def annotate(self, plan: TurnPlan, now: float) -> None:
        """The plan before it is committed (under the loop's lock): explanations the
        runner knows better."""

    def ended(self, job_id: str) -> None:
        """``job_id`` ended (committed): forget it."""

    def carry_out(self, plan: TurnPlan, now: float) -> list[Exit]:
        """Start and stop what the committed ``plan`` says; returns exits for the next
        turn (tasks that could not start, stops of tasks that no longer run)."""
        ...

    def recover(
        self, store: Store, planner: TurnPlanner, now: float
    ) -> tuple[list[Event], list[Exit]]:
        """Rebuild ``planner``'s core from the store (a start, or after a failed turn): the
        tasks that still run are adopted; returns the first turn's events and exits."""
        ...

    def reset(self) -> None:
        """Before a rebuild: drop what the runner tracks for the old core."""

    def keep_exits(self, exits: list[Exit]) -> None:
        """Exits the store could not take (it is unavailable): keep them where a restart
        finds them, should the service stop before the store is back."""

    def drained(self, kind: str, payload: Any) -> None:
        """A post dropped by a rebuild (the store has the API's; keep what else matters)."""

    def next_due(self, now: float) -> float | None:
        """When the runner next has something to do without being posted to."""
        ...

    def queue_of(self, job_id: str) -> str:
        """The queue of a job the runner knows ("" if none), for the metrics."""
        ...

    def node_view(self, cluster: ClusterState) -> list[dict[str, Any]]:
        """The API's node view of the core's cluster (under the loop's lock)."""
        ...

    def decorate(self, nodes: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """The node view as the API serves it (outside the lock)."""
        ...
