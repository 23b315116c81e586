"""The core: events in, actions out, with explanations for every pending job."""

from hetsched.scheduler.actions import (
    Action,
    Bind,
    Change,
    JobTransition,
    Kill,
    Migrate,
    MigrationKind,
    Pending,
    Preempt,
    PreemptionKind,
    Reject,
)
from hetsched.scheduler.core import Scheduler
from hetsched.scheduler.events import (
    DeviceAdded,
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    StartFailed,
    TaskCheckpointed,
    TaskFinished,
    TaskStopped,
    Tick,
)
from hetsched.scheduler.explain import Explanation
from hetsched.scheduler.records import BlockedBy, JobRecord

__all__ = [
    "Action",
    "Bind",
    "BlockedBy",
    "Change",
    "DeviceAdded",
    "DeviceHealthChanged",
    "Event",
    "Explanation",
    "JobCancelled",
    "JobRecord",
    "JobSubmitted",
    "JobTransition",
    "Kill",
    "Migrate",
    "MigrationKind",
    "NodeAdded",
    "NodeChanged",
    "NodeRemoved",
    "Pending",
    "Preempt",
    "PreemptionKind",
    "Reject",
    "Scheduler",
    "StartFailed",
    "TaskCheckpointed",
    "TaskFinished",
    "TaskStopped",
    "Tick",
]
