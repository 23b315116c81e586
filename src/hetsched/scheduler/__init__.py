"""The core: events in, actions out, with explanations for every pending job."""

from hetsched.scheduler.actions import Action, Bind, Kill, Pending, Preempt, Reject
from hetsched.scheduler.core import Scheduler, task_key
from hetsched.scheduler.events import (
    DeviceAdded,
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    NodeAdded,
    NodeRemoved,
    TaskCheckpointed,
    TaskFinished,
    TaskStopped,
    Tick,
)
from hetsched.scheduler.explain import Explanation
from hetsched.scheduler.records import JobRecord

__all__ = [
    "Action",
    "Bind",
    "DeviceAdded",
    "DeviceHealthChanged",
    "Event",
    "Explanation",
    "JobCancelled",
    "JobRecord",
    "JobSubmitted",
    "Kill",
    "NodeAdded",
    "NodeRemoved",
    "Pending",
    "Preempt",
    "Reject",
    "Scheduler",
    "TaskCheckpointed",
    "TaskFinished",
    "TaskStopped",
    "Tick",
    "task_key",
]
