"""The executor interface: what a driver supplies so the interpreter can carry out actions.

An executor starts tasks and stops them; it reports each task's end as an :class:`Exit`,
which the driver hands to :meth:`Interpreter.report` (the interpreter turns it into the
event the core expects, or drops it as stale). How it does so is the driver's business:
the simulator schedules the exit on its virtual clock, the service spawns and signals
processes, the Kubernetes scheduler binds and deletes pods.

Start and Exit are named tuples (one of each per task, on the simulator's hot path); Stop is
a frozen dataclass.

An :class:`Observer` sees what the core says about jobs (their transitions, why they wait,
rejections, preemptions) for the driver to store or report; it carries nothing out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from hetsched.cluster.placement import Placement
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.scheduler.actions import JobTransition, Migrate, Pending, Preempt, Reject

__all__ = ["Executor", "Exit", "Observer", "Start", "Stop"]


class Start(NamedTuple):
    """Start task ``key`` on ``placement`` (the core has allocated it already), resuming
    from checkpoint ``resume`` (None: from scratch)."""

    key: TaskKey
    placement: Placement
    resume: SavedCheckpoint | None = None


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop task ``key``: tell it ``notice_s`` seconds ahead (a chance to checkpoint; 0 for
    none), then end it within ``grace_s`` (SIGTERM, then SIGKILL), and report its Exit.

    ``released``: its node or device is gone and the core freed the allocation already, so
    no report is awaited (one is harmless). ``preemptor`` is set when it is preempted (or
    the job a migration makes room for).

    A second Stop for a task that is already stopping shortens its notice to the new
    ``notice_s`` (counted from the new call; never lengthens it): the interpreter sends
    one with ``notice_s`` 0 when the job reports a checkpoint inside its notice, which
    ends the wait early.
    """

    key: TaskKey
    placement: Placement
    notice_s: float
    grace_s: float
    reason: str
    released: bool = False
    preemptor: str = ""


class Exit(NamedTuple):
    """Task ``key`` ended: on its own (``succeeded`` is its exit status), or because it was
    asked to stop (then the interpreter reports TaskStopped, whatever the status)."""

    key: TaskKey
    succeeded: bool = True
    reason: str = ""


class Executor(Protocol):
    """Starts and stops tasks for the interpreter. Both calls return at once; each task's
    end comes back later as an Exit handed to ``Interpreter.report``."""

    def start(self, tasks: Sequence[Start], now: float) -> None:
        """Start the tasks of one Bind (one job, one run). A task that cannot start is
        reported as an Exit that did not succeed, with the reason."""
        ...

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        """Stop running tasks (one Kill, or the running tasks a Preempt names). A task that
        is already gone is reported at once."""
        ...


class Observer:
    """What the core said about jobs, for the driver to store or report. Every method does
    nothing here; a driver overrides those it needs."""

    def transitioned(self, change: JobTransition) -> None:
        """A job changed state (one call per entry of its history, in order)."""

    def pending(self, action: Pending) -> None:
        """A job waits, or waits for a new reason."""

    def rejected(self, action: Reject) -> None:
        """A job was refused (its transition, if any, came already)."""

    def preempted(self, action: Preempt) -> None:
        """A job's run is being stopped to make room (its tasks' stops follow)."""

    def migrating(self, action: Migrate) -> None:
        """A job's run is being stopped to move it (its tasks' stops follow; the Bind of
        its next run comes once they have stopped)."""

    def lost_work(self, job_id: str, run: int, lost_s: float) -> None:
        """A run that was stopped to be run again (preempted, moved, lost to a node or
        device, restarted after a failure) has ended: it lost ``lost_s`` seconds of work,
        the time from its last checkpoint (or its start) to the stop, 0 when it saved
        inside its notice. Told only by an interpreter made with ``lost_work=True``."""
