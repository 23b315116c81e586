"""The executor protocol: what an engine supplies so that the core's actions run on it.

This module is the one statement of it. Every engine (the simulator's virtual clock, local
processes, Ray actors, Kubernetes pods, a federation's member clusters) implements
:class:`Executor`; the interpreter (``drivers/interpreter.py``) is the one reader of the
core's actions and calls it.

**The part every executor has** (:class:`Executor`):

- ``start(tasks, now)``: start the tasks of one Bind, each a :class:`Start` (key,
  placement, the checkpoint it resumes from, and for an engine that runs commands the
  :class:`Launch` saying what to run). Returns at once. A task that cannot start is
  reported as an :class:`Exit` that did not succeed, with the reason (``cannot start: ...``).
- ``stop(tasks, now)``: stop running tasks, each a :class:`Stop`: tell the task
  ``notice_s`` ahead where the executor gives notice (:class:`GivesNotice`; the others stop
  at once), then end it within ``grace_s`` (SIGTERM, then SIGKILL, or the engine's
  equivalent). A task that is gone already is reported at once, stopped. A second Stop of a
  task in its notice shortens the notice, never lengthens it.
- exits, by callback or by poll: each task's end comes back once as an :class:`Exit`. An
  executor that learns of ends as they happen hands them to the driver's callback (the
  simulator and the Kubernetes executor call ``Interpreter.report``) and its ``poll``
  returns nothing; a process executor returns them from ``poll(now)``, which is also
  where it escalates stops and enforces maximum runtimes (:class:`Polled` says when).
- ``shutdown()``: forget the tasks without stopping them (a control plane that restarts
  finds them again where the executor can adopt them); idempotent.

**Optional capabilities**, each a runtime-checkable Protocol that a driver tests with
``isinstance`` (never by probing attributes): :class:`Polled` (when to poll, and a
wake-up when a task ends), :class:`Adopts` (find tasks again after a restart),
:class:`Fences` (run a task only under a federation's lease), :class:`GivesNotice` (tell
a task ahead of its stop), :class:`KillsByPid` (kill a process group by pid: the overcommit
guard), :class:`ProcessTasks` (tasks that are processes with logs under a home).
:class:`ProcessExecutor` is what ``hetsched up`` needs of its executor: the sum of the
process capabilities (the local and the Ray executor).

An :class:`Observer` sees what the core says about jobs (their transitions, why they wait,
rejections, preemptions) for the driver to store or report; it carries nothing out.

Start and Exit are named tuples (one of each per task, on the simulator's hot path); Stop
and Launch are frozen dataclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

from hetsched.cluster.placement import Placement
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.device import Device
from hetsched.scheduler.actions import JobTransition, Migrate, Pending, Preempt, Reject

__all__ = [
    "Adopts",
    "Executor",
    "Exit",
    "Fences",
    "GivesNotice",
    "KeepsExits",
    "KillsByPid",
    "Launch",
    "Observer",
    "Polled",
    "ProcessExecutor",
    "ProcessTasks",
    "RunAs",
    "Start",
    "Stop",
    "TaskView",
]


@dataclass(frozen=True, slots=True)
class RunAs:
    """The OS account a task runs as (only when the control plane runs as root)."""

    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class Launch:
    """What a task runs, for an executor that runs commands: ``devices`` holds (device,
    share, index within its class and vendor on the node); ``fence`` is a federation's
    lease file (only an executor that :class:`Fences` runs such a task; another reports
    it as not started)."""

    command: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str | None = None
    devices: tuple[tuple[Device, int, int], ...] = ()
    max_runtime_s: float | None = None
    run_as: RunAs | None = None
    fence: Path | None = None


class Start(NamedTuple):
    """Start task ``key`` on ``placement`` (the core has allocated it already), resuming
    from checkpoint ``resume`` (None: from scratch), running ``launch`` (None where the
    engine needs no command: a simulated task, a pod whose spec says it)."""

    key: TaskKey
    placement: Placement
    resume: SavedCheckpoint | None = None
    launch: Launch | None = None
    #: how many tasks its run has (an elastic job's count; 0: the job's ``replicas``)
    replicas: int = 0


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop task ``key``: tell it ``notice_s`` seconds ahead (a chance to checkpoint; 0 for
    none) by ``notice_signal`` (or the engine's equivalent), then end it within ``grace_s``
    (SIGTERM, then SIGKILL), and report its Exit.

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
    notice_signal: str = "SIGUSR1"


class Exit(NamedTuple):
    """Task ``key`` ended: on its own (``succeeded`` is its exit status), or because it was
    asked to stop (then the interpreter reports TaskStopped, whatever the status).

    A process executor says more: ``code`` is the exit status (None: unknown, the task was
    lost, or it never ran; a negative number is the signal that ended it), ``stopped``
    that it ended after it was asked to stop, ``not_started`` that its command never ran
    because its federation's lease had expired (the run goes back to the queue rather
    than failing: docs/federation.md)."""

    key: TaskKey
    succeeded: bool = True
    reason: str = ""
    code: int | None = None
    stopped: bool = False
    not_started: bool = False

    @classmethod
    def of(
        cls,
        job_id: str,
        task: int,
        run: int,
        code: int | None,
        stopped: bool,
        reason: str,
        not_started: bool = False,
    ) -> Exit:
        """A process's exit: it succeeded when its status is 0."""
        key = TaskKey(job_id, task, run)
        return cls(key, code == 0 and not not_started, reason, code, stopped, not_started)

    @property
    def job_id(self) -> str:
        return self.key.job

    @property
    def task(self) -> int:
        return self.key.task

    @property
    def run(self) -> int:
        return self.key.run

    @property
    def exit_code(self) -> int | None:
        return self.code


# -- the part every executor has -------------------------------------------------------------


@runtime_checkable
class Executor(Protocol):
    """Starts and stops tasks for the interpreter (see the module docstring). Every call
    returns at once; each task's end comes back later, once, as an Exit."""

    def start(self, tasks: Sequence[Start], now: float) -> None:
        """Start the tasks of one Bind (one job, one run). A task that cannot start is
        reported as an Exit that did not succeed, with the reason."""
        ...

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        """Stop running tasks (one Kill, or the running tasks a Preempt names). A task that
        is already gone is reported at once (stopped)."""
        ...

    def poll(self, now: float) -> list[Exit]:
        """The exits learnt since the last poll, each once; empty for an executor that
        hands its exits to the driver's callback as they happen."""
        ...

    def shutdown(self) -> None:
        """Forget the tasks without stopping them; idempotent."""
        ...


# -- optional capabilities -------------------------------------------------------------------


@runtime_checkable
class Polled(Protocol):
    """Its exits come from :meth:`Executor.poll`; it says when to poll."""

    #: called (perhaps from another thread) when a task ends, where the executor can tell
    #: at once; the driver then polls without waiting for a timer
    on_exit: Callable[[], None] | None

    @property
    def exits_reported(self) -> bool:
        """Whether ``on_exit`` is called for every task that ends; if not, the driver polls
        while tasks run."""
        ...

    def next_due(self) -> float | None:
        """The earliest time ``poll`` has work of its own (a SIGKILL after a grace, a
        maximum runtime, an exit it already knows of); None if nothing is due."""
        ...


@runtime_checkable
class Adopts(Protocol):
    """Finds its tasks again after the control plane restarted: tasks outlive it."""

    def find_leaders(self) -> dict[str, tuple[int, float]]:
        """Task key -> (pid, start time) of each task of this instance still there (found
        by key: also those whose pid was never recorded)."""
        ...

    def adopt(
        self,
        job_id: str,
        task: int,
        run: int,
        pid: int,
        pid_started: float,
        deadline: float | None,
    ) -> TaskView | None:
        """Watch a task started by an earlier incarnation, if it is that task still; its
        exit comes back like any other."""
        ...

    def recorded_exit(self, job_id: str, task: int, run: int) -> int | None:
        """The exit status of a task that ended while nobody watched, if it is known."""
        ...

    def sweep(self, live_keys: Iterable[str]) -> Sequence[int | str]:
        """Kill the tasks of this instance that no live task accounts for; returns what it
        killed (pids or keys)."""
        ...


@runtime_checkable
class Fences(Protocol):
    """Runs a task whose :class:`Launch` has a ``fence`` only while that lease is live,
    and ends it, on its own, ``fence_backstop_s`` after the lease expires (whether or not
    the control plane is alive to stop it). A task whose lease had expired before it ran
    exits with ``not_started``."""

    #: seconds after a fenced task's lease expiry at which it is killed without the driver
    fence_backstop_s: int


@runtime_checkable
class GivesNotice(Protocol):
    """Tells a task ahead of its stop: a Stop with ``notice_s`` sends the notice now and
    stops the task ``notice_s`` later. An executor without it stops at once."""

    def in_notice(self, key: TaskKey) -> bool:
        """Whether the task was told and its notice is not over."""
        ...


@runtime_checkable
class KillsByPid(Protocol):
    """Its tasks are processes of this machine: a pid names one (the overcommit guard
    measures them by pid and kills through this)."""

    def kill_pid(self, pid: int) -> None:
        """SIGKILL the process group led by ``pid`` now."""
        ...


@runtime_checkable
class KeepsExits(Protocol):
    """Keeps exit statuses that the control plane's store could not take off the disk
    that may lose them (a journal in memory-backed storage), for :meth:`Adopts.recorded_exit`
    after a restart."""

    def keep_exits(self, exits: Sequence[Exit]) -> None:
        """Journal the statuses of ``exits`` (those with one)."""
        ...

    def forget_journal(self) -> None:
        """Drop the journal: the store holds every exit it kept (a clean stop)."""
        ...


class TaskView(Protocol):
    """A running task as a process executor tracks it."""

    @property
    def job_id(self) -> str: ...
    @property
    def task(self) -> int: ...
    @property
    def run(self) -> int: ...
    @property
    def pid(self) -> int: ...
    @property
    def pid_started(self) -> float: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def key(self) -> str: ...


@runtime_checkable
class ProcessTasks(Protocol):
    """Its tasks are processes, keyed by the string form of their TaskKey, with their logs
    under ``home`` (``<home>/jobs/<id>/task-<n>.out|.err``)."""

    #: seconds between SIGTERM and SIGKILL when a task is stopped without its own grace
    kill_grace_s: float

    @property
    def home(self) -> Path: ...
    @property
    def instance(self) -> str: ...
    @property
    def handles(self) -> Mapping[str, TaskView]: ...

    def log_path(self, job_id: str, task: int, stream: str) -> Path: ...

    def kill(self, key: str) -> bool:
        """SIGKILL the task's group now; its exit comes from a later poll. False when no
        such task is watched."""
        ...


@runtime_checkable
class ProcessExecutor(Executor, Polled, Adopts, ProcessTasks, Protocol):
    """What ``hetsched up`` needs of its executor: the local process executor
    (``agent/executor.py``) and the Ray executor (``ray/executor.py``)."""


# -- what the core says about jobs -----------------------------------------------------------


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
