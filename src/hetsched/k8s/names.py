"""The names hetsched's Kubernetes parts agree on: resources, labels and annotations.

The device plugin publishes what the kubelet only counts; the scheduler reads it, decides,
and writes its decision where the device plugin reads it at Allocate time.
"""

from __future__ import annotations

__all__ = [
    "ASSIGNED_DEVICES",
    "ASSIGN_PHASE",
    "DEVICE_SELECTOR",
    "DEVICE_SHARE",
    "DOMAIN",
    "NODE_DEVICES",
    "POD_GROUP",
    "POD_GROUP_MIN",
    "QUEUE",
    "SCHEDULER_NAME",
    "SHARED_SUFFIX",
    "resource_name",
]

DOMAIN = "hetsched.io"
#: the default ``spec.schedulerName`` of pods hetsched schedules
SCHEDULER_NAME = "hetsched"


def resource_name(device_class: str) -> str:
    """The extended resource a device class is advertised as: ``hetsched.io/gpu``."""
    return f"{DOMAIN}/{device_class}"


#: Suffix of the resource that advertises slots of shared devices (``hetsched.io/gpu-shared``):
#: several pods share one device, each with the share the scheduler assigned it
SHARED_SUFFIX = "-shared"


#: Node annotation written by the device plugin: a JSON list of the node's devices, each
#: ``{"id", "class", "vendor", "model", "attributes": {...}, "health": "healthy"|"unhealthy"}``
NODE_DEVICES = f"{DOMAIN}/devices"

#: Pod annotation written by the scheduler before binding: a JSON list ``[{"id", "share"}]``
#: of the devices (and shares of them) the pod's container gets
ASSIGNED_DEVICES = f"{DOMAIN}/assigned-devices"
#: Pod annotation: ``allocating`` when the scheduler has assigned devices, ``allocated``
#: once the device plugin's Allocate has handed them to the container
ASSIGN_PHASE = f"{DOMAIN}/assign-phase"

#: Pod annotation: the share per device in milli-units (``"300"``), for a fractional request
#: of one device (the pod's resource limit for the class must then be 1)
DEVICE_SHARE = f"{DOMAIN}/share"
#: Pod annotation: a CEL selector over device attributes (DRA syntax)
DEVICE_SELECTOR = f"{DOMAIN}/selector"

#: Pod label: the pod group (gang) the pod belongs to
POD_GROUP = f"{DOMAIN}/pod-group"
#: Pod annotation: how many pods of the group must start together (the gang minimum)
POD_GROUP_MIN = f"{DOMAIN}/min-available"
#: Pod label: the hetsched queue the pod is charged to (default: its namespace)
QUEUE = f"{DOMAIN}/queue"
