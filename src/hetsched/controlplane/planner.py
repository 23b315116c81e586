"""The turn planner: what one turn of ``hetsched up`` decides, with no I/O.

Events in (the API's submissions and cancellations, device changes, the tasks' exits),
decisions out (a :class:`TurnPlan`): the core's actions carried out by the shared
interpreter into tasks to start and tasks to stop, and what the store must record about
jobs. The reconcile loop commits a plan before it launches or signals anything, so a crash
in between leaves a store that recovery can read.

The planner owns the core and the interpreter; it reads the core only through its actions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hetsched.agent.checkpoints import Report
from hetsched.cluster.placement import Placement
from hetsched.drivers import Exit, Interpreter, Observer, Start, Stop, in_order
from hetsched.keys import TaskKey
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Action,
    Change,
    Event,
    JobTransition,
    Migrate,
    MigrationKind,
    Pending,
    Preempt,
    Scheduler,
    StartFailed,
    TaskCheckpointed,
    Tick,
)

__all__ = ["TurnPlan", "TurnPlanner", "exit_of"]

#: how long a run its federation's lease kept from starting waits before it is tried again
#: (by then the lease is renewed, or has lapsed and the job is cancelled)
_FENCED_BACKOFF_S = 1.0


@dataclass(slots=True)
class TurnPlan:
    """What one turn decided, in the order the core decided it."""

    now: float
    actions: list[Action] = field(default_factory=list)
    #: tasks to launch once the plan is committed
    starts: list[Start] = field(default_factory=list)
    #: tasks to signal once the plan is committed
    stops: list[Stop] = field(default_factory=list)
    #: every job's changes, for its row and its history
    transitions: list[JobTransition] = field(default_factory=list)
    #: job id -> its newest explanation (a job that starts in the same turn has none)
    explanations: dict[str, Pending | None] = field(default_factory=dict)
    #: jobs preempted in this turn (once per Preempt), and moved (once per Migrate)
    preempted: list[str] = field(default_factory=list)
    migrated: list[str] = field(default_factory=list)
    #: checkpoints the tasks reported that the core took, in order
    checkpoints: list[TaskCheckpointed] = field(default_factory=list)
    #: (job, run, seconds) for each run stopped to be run again that ended this turn
    lost: list[tuple[str, int, float]] = field(default_factory=list)
    #: where moving jobs go: their next run's tasks, held for them from the Migrate on
    #: (``reserved`` rows in the store, so that a restart finds the move), the starts that
    #: take up such a reservation, and the reservations given up (the job ended or was
    #: requeued before it arrived)
    reserved: list[tuple[TaskKey, Placement]] = field(default_factory=list)
    arrived: set[TaskKey] = field(default_factory=set)
    unreserved: list[TaskKey] = field(default_factory=list)
    #: elastic jobs whose count changed: (job, run, count, cause), for their resize file
    resized: list[tuple[str, int, int, str]] = field(default_factory=list)


def exit_of(exit_: Exit) -> Exit:
    """A process exit as the interpreter reads it."""
    key = TaskKey(exit_.job_id, exit_.task, exit_.run)
    return Exit(key, exit_.exit_code == 0, exit_.reason)


class TurnPlanner(Observer):
    """Plans turns on ``core``; ``kill_grace_s`` is the grace a Kill gives a task."""

    def __init__(self, core: Scheduler, kill_grace_s: float) -> None:
        self.core = core
        self.interpreter = Interpreter(_Recorder(self), self, kill_grace_s, lost_work=True)
        self._plan = TurnPlan(0.0)
        #: moving job -> the next run's tasks held for it, until they start or are given up
        self._moving: dict[str, frozenset[TaskKey]] = {}

    def reserve(self, keys: Sequence[TaskKey]) -> None:
        """Tasks of the next run of a job that is moving, held for it already (recovery
        took the move back with ``Scheduler.restore_moving``)."""
        for key in keys:
            self._moving[key.job] = self._moving.get(key.job, frozenset()) | {key}

    def adopt(
        self,
        key: TaskKey,
        placement: Placement,
        run: tuple[float, float | None] | None = None,
        stop: Stop | None = None,
        stopped_at: float | None = None,
    ) -> None:
        """A task that runs already (recovery took its job back with ``Scheduler.restore``),
        or that is in its notice (``stop``; its run stopped at ``stopped_at``). ``run``:
        when its run started and the time of its last checkpoint, for its lost work."""
        started, checkpoint = run if run is not None else (None, None)
        self.interpreter.adopt(key, placement, started, checkpoint, stop, stopped_at)

    def plan(
        self,
        events: Sequence[Event],
        exits: Sequence[Exit],
        now: float,
        reports: Sequence[tuple[TaskKey, Report]] = (),
    ) -> TurnPlan:
        """Report the exits and the checkpoints tasks reported (one inside a notice ends
        it: its early stops are in the plan), hand the core everything in the drivers' one
        order (with a Tick, so the time-based rules run every turn), and carry out its
        actions."""
        plan = self._plan = TurnPlan(now)
        reported: list[Event] = []
        for key, report in reports:
            saved = self.interpreter.checkpointed(key, now, report.step, report.path)
            if saved is not None:
                reported.append(saved)
                plan.checkpoints.append(saved)
        for exit_ in exits:
            key = TaskKey(exit_.job_id, exit_.task, exit_.run)
            if exit_.not_started and key in self.interpreter.running:
                # the command never ran: the run goes back to the queue (its other tasks
                # are killed and reported stopped), no failure counted against the job
                failed = StartFailed(key.job, key.run, exit_.reason, _FENCED_BACKOFF_S)
                if failed not in reported:
                    reported.append(failed)
                continue
            event = self.interpreter.report(exit_of(exit_))
            if event is not None:
                reported.append(event)
        batch = in_order([*reported, *events, Tick()])
        plan.actions = self.core.handle(batch, now)
        self.interpreter.carry_out(plan.actions, now)
        return plan

    def running(self) -> dict[TaskKey, Placement]:
        """Tasks started and not yet reported ended, with their placements."""
        return dict(self.interpreter.running)

    def live(self) -> list[TaskKey]:
        """Tasks started and not yet reported ended, stopping ones included."""
        return [*self.interpreter.running, *self.interpreter.stopping]

    # -- the Observer: what the store records about jobs ----------------------------------

    def transitioned(self, change: JobTransition) -> None:
        self._plan.transitions.append(change)
        if change.change is Change.RESIZED and change.replicas:
            self._plan.resized.append((change.job_id, change.run, change.replicas, change.cause))
        if change.target is not JobState.PENDING:
            self._plan.explanations[change.job_id] = None
        if change.target is not JobState.RUNNING and change.job_id in self._moving:
            # it ends or waits again before it arrived: where it was moving is free
            self._plan.unreserved += sorted(self._moving.pop(change.job_id))

    def pending(self, action: Pending) -> None:
        self._plan.explanations[action.job_id] = action

    def preempted(self, action: Preempt) -> None:
        self._plan.preempted.append(action.job_id)

    def migrating(self, action: Migrate) -> None:
        if action.kind is not MigrationKind.RESIZE:  # a resize is no move
            self._plan.migrated.append(action.job_id)
        held = [(TaskKey(action.job_id, t, action.run + 1), p) for t, p in action.placements]
        self._plan.reserved += held
        self._moving[action.job_id] = frozenset(key for key, _ in held)

    def lost_work(self, job_id: str, run: int, lost_s: float) -> None:
        self._plan.lost.append((job_id, run, lost_s))

    # -- the executor: starts and stops wait in the plan until it is committed ------------

    def started(self, tasks: Sequence[Start]) -> None:
        self._plan.starts.extend(tasks)
        held = self._moving.get(tasks[0].key.job) if self._moving and tasks else None
        if held is not None and any(t.key in held for t in tasks):
            del self._moving[tasks[0].key.job]
            self._plan.arrived.update(t.key for t in tasks if t.key in held)

    def stopped(self, tasks: Sequence[Stop]) -> None:
        self._plan.stops.extend(tasks)


@dataclass(frozen=True, slots=True)
class _Recorder:
    """The planner as the interpreter's executor: nothing is launched while planning."""

    planner: TurnPlanner

    def start(self, tasks: Sequence[Start], now: float) -> None:
        self.planner.started(tasks)

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        self.planner.stopped(tasks)

    def poll(self, now: float) -> list[Exit]:
        return []  # the exits come from the launcher's executor, after the commit

    def shutdown(self) -> None:
        pass
