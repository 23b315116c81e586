"""How busy each device is, 0..1: ``hetsched_device_utilization_ratio`` and the dashboard.

Two sources, the first that knows a device wins:

- ``device``: a part of the agent reads the device itself. The device watcher does through
  NVML for NVIDIA GPUs (the share of NVML's last sample period in which a kernel ran; whole
  GPUs only, NVML does not report MIG instances).
- ``guard``: for every other device of an active node while the overcommit guard runs, an
  estimate from what the guard measures of the tasks' processes. A device's work is fed by
  a host process, so a task counts as busy as its processes keep the CPU it may use busy:
  ``activity = min(1, CPU used / min(CPU requested, 1 core))`` (1 core when it requested
  none), and a device is busy by the sum, over the running tasks that hold it, of their
  share of it times their activity (at most 1). A device no running task holds is idle.

Without either (no NVML and the guard off) a device has no value: nothing measured it. Nor
has a device of a simulated node (``hetsched up --cluster`` and ``--demo`` label theirs
:data:`SIMULATED_LABEL`): its tasks run here, but no such device does, so the dashboard says
"not measured" rather than estimate it from processes standing in for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.keys import TaskKey
from hetsched.model.device import SHARE_UNITS, Device

__all__ = [
    "SIMULATED_LABEL",
    "GuardLike",
    "MeasuresUtilization",
    "Reading",
    "activity",
    "device_utilization",
    "task_devices",
    "task_of_key",
]

#: the label of a simulated node (its devices exist on paper only)
SIMULATED_LABEL = "hetsched.io/simulated"

#: the CPU a task's processes must keep busy to count as driving its devices fully
_FULL_CORE_MILLI = 1000


@runtime_checkable
class MeasuresUtilization(Protocol):
    """Something that measures how busy each device is: device id -> 0..1 (the device
    watcher, through NVML)."""

    def utilization(self) -> Mapping[str, float]: ...


@runtime_checkable
class GuardLike(Protocol):
    """What is read from the agent's overcommit guard (agent/guard.py): alerts raised so far
    by kind, kills asked for, and the last usage measured per task (``cpu_milli``,
    ``memory_mib``, ``gpu_memory_mib``) by executor task key."""

    counts: Mapping[str, int]
    kills: int
    usage: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Reading:
    """One device's busy share and where it comes from (``device`` or ``guard``)."""

    value: float
    source: str


def activity(cpu_used_milli: float, cpu_requested_milli: int) -> float:
    """How busy a task keeps its devices, 0..1, from its processes' CPU use (see above)."""
    full = min(cpu_requested_milli, _FULL_CORE_MILLI) if cpu_requested_milli > 0 else 0
    return min(1.0, max(0.0, cpu_used_milli) / (full or _FULL_CORE_MILLI))


def device_utilization(
    parts: Iterable[object],
    devices: Mapping[str, Device],
    running: Mapping[tuple[str, int], Placement],
) -> dict[str, Reading]:
    """Device id -> its reading, for the ``devices`` of active nodes; ``parts`` are the
    service's agent parts (watchers, guards), ``running`` the placements of running tasks
    by (job, task)."""
    out: dict[str, Reading] = {}
    guards: list[GuardLike] = []
    for part in parts:
        if isinstance(part, MeasuresUtilization):
            for device_id, value in part.utilization().items():
                if device_id in devices and device_id not in out:
                    out[device_id] = Reading(min(1.0, max(0.0, float(value))), "device")
        if isinstance(part, GuardLike):
            guards.append(part)
    if not guards:
        return out
    busy: dict[str, float] = dict.fromkeys(devices, 0.0)
    for guard in guards:
        for key, usage in dict(guard.usage).items():
            placement = running.get(task_of_key(key))
            if placement is None:
                continue
            active = activity(float(usage.cpu_milli), placement.cpu_milli)
            for share in placement.devices:
                if share.device_id in busy:
                    busy[share.device_id] += share.share / SHARE_UNITS * active
    for device_id, value in busy.items():
        if device_id not in out:
            out[device_id] = Reading(min(1.0, value), "guard")
    return out


def task_of_key(key: str) -> tuple[str, int]:
    """An executor's task key as (job, task); ("", -1) if it is not one."""
    try:
        parsed = TaskKey.parse(key)
    except ValueError:
        return "", -1
    return parsed.job, parsed.task


def task_devices(
    state: ClusterState, running: Mapping[tuple[str, int], Placement]
) -> dict[tuple[str, int], list[tuple[str, str]]]:
    """(job, task) -> (class, model) of each device its running task holds."""
    out: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for (job_id, task), placement in running.items():
        kinds = []
        for share in placement.devices:
            device = state.device_of(share.device_id)
            kinds.append((device.device_class, device.model))
        if kinds:
            out[(job_id, task)] = kinds
    return out
