"""Events: what drivers tell the core. Plain frozen dataclasses, no behaviour."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetsched.model.checkpoint import SavedCheckpoint
from hetsched.model.device import Device, Health, Node, Taint
from hetsched.model.job import Job

__all__ = [
    "DeviceAdded",
    "DeviceHealthChanged",
    "Event",
    "JobCancelled",
    "JobSubmitted",
    "NodeAdded",
    "NodeChanged",
    "NodeRemoved",
    "StartFailed",
    "TaskCheckpointed",
    "TaskFinished",
    "TaskStopped",
    "Tick",
]


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    """A job to schedule. A job the driver knew before a restart and submits again (it was
    pending, or its placements could not be restored) says how far it got: its runs
    continue after ``run`` and ``restarts`` restarts are already counted against its
    restart policy; ``checkpoint`` is the last checkpoint it reported, which its next run
    resumes from."""

    job: Job
    run: int = 0
    restarts: int = 0
    #: when the job entered the queue, if not at this ``handle`` call: a driver that knew
    #: the job before a restart (or accepted it earlier than it could hand it over) keeps
    #: its queue time, so its aging and its place in line continue
    queued_since: float | None = None
    checkpoint: SavedCheckpoint | None = None


@dataclass(frozen=True, slots=True)
class JobCancelled:
    job_id: str
    reason: str = "cancelled by user"


@dataclass(frozen=True, slots=True)
class TaskFinished:
    """A task's process ended on its own; ``succeeded`` is its exit status (0 = True).

    ``run`` is the run number from the Bind that started it: a late report from an earlier
    run (the job was requeued since) is ignored, so it can never touch the current run.
    """

    job_id: str
    task: int
    run: int
    succeeded: bool = True
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TaskStopped:
    """A task stopped on the core's request (Kill or Preempt): its resources are free now.

    Until the driver reports this, the core keeps the task's allocation held, so a device
    is never handed to a new task while the old process may still be using it.
    """

    job_id: str
    task: int
    run: int


@dataclass(frozen=True, slots=True)
class StartFailed:
    """The driver could not start run ``run`` of the job: an API refused to start one of
    its tasks (a Kubernetes Binding that failed), so the run never ran as a whole.

    Every task of the run is stopped (Kill; each allocation stays held until its
    TaskStopped, as a started task may be running already) and the job goes back to the
    queue, as it was: no restart is counted against its policy. It is not tried again for
    ``backoff_s`` seconds (the driver's retry policy). A report for another run, or for a
    job that is not running, is ignored.
    """

    job_id: str
    run: int
    reason: str = ""
    backoff_s: float = 0.0


@dataclass(frozen=True, slots=True)
class TaskCheckpointed:
    """A task of run ``run`` saved a checkpoint: at ``at`` (a driver that learns of it late
    says when), else at the time of the ``handle`` call.

    The job's last checkpoint is what its next run resumes from (each Bind carries it),
    and preemption prefers victims that lose the least work: the time since their last
    checkpoint (or since their run started, without one). A checkpoint is the job's: any
    of its tasks may report it, running or in its notice (a report inside the notice is
    what lets the driver end the notice early). ``step`` and ``path`` are the task's own
    words, handed back on resume; ``progress`` is the work done, where the driver knows it
    (the simulator). A report for another run, or older than the last one, is ignored.
    """

    job_id: str
    task: int
    run: int
    step: int | None = None
    path: str = ""
    progress: float | None = None
    at: float | None = None


@dataclass(frozen=True, slots=True)
class NodeAdded:
    node: Node


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    name: str
    reason: str = "node removed"


@dataclass(frozen=True, slots=True)
class NodeChanged:
    """A node's labels or taints changed (None: unchanged); its capacity and devices did
    not. What runs there keeps running (taints act as NoSchedule); placement sees the new
    labels and taints from this call on, and jobs waiting for room or for a node that
    could hold them are tried again."""

    name: str
    labels: Mapping[str, str] | None = None
    taints: tuple[Taint, ...] | None = None


@dataclass(frozen=True, slots=True)
class DeviceHealthChanged:
    """A device turned unhealthy or went away (its tasks are stopped and their jobs handled
    by each job's ``on_device_failure``), or is healthy again (capacity grows). ``reason``
    says which, for the jobs' histories: ``removed``, ``unhealthy: XID 79``, ..."""

    device_id: str
    health: Health
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DeviceAdded:
    """A device appeared on a node (hot-plug). A device the core knows already (one that
    went away and came back) takes the health given here instead."""

    node_name: str
    device: Device


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed; lets time-based rules act with no other event: aging, gang hold timeouts
    and backoff, maximum pending time (Reject) and maximum runtime (Kill). Drivers call
    ``handle([Tick()], now)`` periodically, or at ``Scheduler.next_wakeup()``, when the
    next of those rules is due."""


Event = (
    JobSubmitted
    | JobCancelled
    | TaskFinished
    | TaskStopped
    | StartFailed
    | TaskCheckpointed
    | NodeAdded
    | NodeRemoved
    | NodeChanged
    | DeviceHealthChanged
    | DeviceAdded
    | Tick
)
