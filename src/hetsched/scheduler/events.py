"""Events: what drivers tell the core. Plain frozen dataclasses, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.model.device import Health, Node
from hetsched.model.job import Job

__all__ = [
    "DeviceHealthChanged",
    "Event",
    "JobCancelled",
    "JobSubmitted",
    "NodeAdded",
    "NodeRemoved",
    "TaskFinished",
    "Tick",
]


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    job: Job


@dataclass(frozen=True, slots=True)
class JobCancelled:
    job_id: str
    reason: str = "cancelled by user"


@dataclass(frozen=True, slots=True)
class TaskFinished:
    """A task's process ended; ``succeeded`` is its exit status (0 = True)."""

    job_id: str
    task: int
    succeeded: bool = True
    reason: str = ""


@dataclass(frozen=True, slots=True)
class NodeAdded:
    node: Node


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    name: str
    reason: str = "node removed"


@dataclass(frozen=True, slots=True)
class DeviceHealthChanged:
    device_id: str
    health: Health


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed; lets time-based rules (aging, timeouts) act with no other event."""


Event = (
    JobSubmitted
    | JobCancelled
    | TaskFinished
    | NodeAdded
    | NodeRemoved
    | DeviceHealthChanged
    | Tick
)
