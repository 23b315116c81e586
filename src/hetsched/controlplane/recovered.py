"""What recovery finds (``controlplane/recovery.py``), for the loop's first turn, and the one
way recovery ends a task: its process gone, its end recorded, what it held released."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from hetsched.agent.executor import task_key
from hetsched.cluster.placement import Placement
from hetsched.controlplane.schemas import SubmitSpec
from hetsched.controlplane.storage.store import Store
from hetsched.drivers.executor import Exit, ProcessExecutor
from hetsched.keys import TaskKey
from hetsched.model.job import Job
from hetsched.scheduler import Event, Scheduler

__all__ = ["LIVE_STATES", "LiveJob", "Noticed", "Recovered", "RecoveryPass", "finish_task"]

#: task states in which a process may still run and an allocation may still be held
LIVE_STATES = ("starting", "running")


@dataclass(slots=True)
class Recovered:
    """What recovery found, for the loop's first turn."""

    #: resubmissions and cancellations asked before the restart
    events: list[Event] = field(default_factory=list)
    #: tasks of restored jobs that ended while the service was down
    exits: list[Exit] = field(default_factory=list)
    #: every live job and its spec
    jobs: list[tuple[Job, SubmitSpec]] = field(default_factory=list)
    #: tasks the core holds again (restored jobs), with their placements
    adopted: list[tuple[TaskKey, Placement]] = field(default_factory=list)
    #: executor keys of the processes adopted
    processes: list[str] = field(default_factory=list)
    #: tasks adopted in their notice (their jobs wait in the core with them stopping, or
    #: run moving)
    stopping: list[Noticed] = field(default_factory=list)
    #: the next run's tasks of jobs moving, held for them where they move
    moving: list[TaskKey] = field(default_factory=list)
    #: job id -> when its current run started and the time of its last checkpoint in that
    #: run (None: none), for the lost work of the runs adopted
    runs: dict[str, tuple[float, float | None]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Noticed:
    """A task adopted in its preemption notice: SIGTERM follows at ``deadline`` (unix time;
    at once if that has passed or the job checkpointed inside the notice already); its run
    was stopped at ``stopped_at``."""

    key: TaskKey
    placement: Placement
    deadline: float
    stopped_at: float
    reason: str
    #: False: its process ended while the service was down (its exit is in
    #: :attr:`Recovered.exits`): nothing to signal
    alive: bool = True


@dataclass(slots=True)
class LiveJob:
    """One live job row, being recovered."""

    row: dict[str, Any]
    job: Job
    run: int
    placements: dict[int, Placement] = field(default_factory=dict)
    exits: list[Exit] = field(default_factory=list)


def finish_task(
    store: Store,
    conn: Connection,
    executor: ProcessExecutor,
    leaders: dict[str, tuple[int, float]],
    t: dict[str, Any],
    state: str,
    now: float,
    reason: str,
    exit_code: int | None = None,
) -> None:
    """Make sure the task's process is gone (found by its recorded pid, else by its key),
    then record that it ended and free what it held. Its exit, if the executor reports one
    later, is stale: the task's row has ended already."""
    pid, started = t["pid"], t["pid_started"]
    leader = leaders.get(task_key(t["job_id"], int(t["task"]), int(t["run"])))
    if not (pid and started is not None) and leader is not None:
        pid, started = leader
    if (pid and started is not None) or leader is not None:
        handle = executor.adopt(t["job_id"], t["task"], t["run"], pid or 0, started or 0.0, None)
        if handle is not None:
            executor.kill(handle.key)
    store.record_task_end(conn, t, state, now, reason, exit_code)


@dataclass(slots=True)
class RecoveryPass:
    """One recovery pass: its store transaction, core and executor, the processes found by
    their keys (``leaders``), what it has found so far, and the jobs it treats apart."""

    store: Store
    conn: Connection
    core: Scheduler
    executor: ProcessExecutor
    leaders: dict[str, tuple[int, float]]
    found: Recovered
    now: float
    queued: dict[str, float]
    #: jobs whose stopping tasks may be in their notice, and jobs moving (their reserved rows)
    noticed: set[str]
    moving: dict[str, list[dict[str, Any]]]
    #: jobs to submit again: (job, run, restarts, saved checkpoint)
    resubmit: list[tuple[Job, int, int, Any]] = field(default_factory=list)
    #: waiting jobs whose cancel was asked for and not yet acted on: ended in the store
    cancelled: list[str] = field(default_factory=list)

    def finish(
        self,
        t: dict[str, Any],
        state: str,
        reason: str,
        exit_code: int | None = None,
        by_key: bool = True,
    ) -> None:
        """:func:`finish_task` in this pass; ``by_key=False``: a process only by the pid
        the task's row recorded (a stopping task of a job in its notice)."""
        leaders = self.leaders if by_key else {}
        finish_task(
            self.store, self.conn, self.executor, leaders, t, state, self.now, reason, exit_code
        )
