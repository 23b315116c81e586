"""The names hetsched's Kubernetes parts agree on: resources, labels and annotations.

The device plugin publishes what the kubelet only counts; the scheduler reads it, decides,
and writes its decision where the device plugin reads it at Allocate time.
"""

from __future__ import annotations

__all__ = [
    "ASSIGNED_DEVICES",
    "ASSIGNED_FOR",
    "ASSIGN_PHASE",
    "CHECKPOINT",
    "CHECKPOINTED",
    "CHECKPOINT_DIR",
    "DEFAULT_SLOT_SHARE",
    "DEVICE_SELECTOR",
    "DEVICE_SHARE",
    "DOMAIN",
    "NODE_DEVICES",
    "NOTICE_CONDITION",
    "POD_GROUP",
    "POD_GROUP_MIN",
    "PREEMPTION_NOTICE",
    "QUEUE",
    "RESUME_FROM",
    "RESUME_STEP",
    "SCHEDULER_NAME",
    "SHARED_SUFFIX",
    "SPEED",
    "SPEED_JOB_TYPE",
    "SPEED_WORK",
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

#: Pod annotation written by the scheduler in the pod's Binding: a JSON list
#: ``[{"id", "share", "resource"}]`` of the devices (and shares of them) the pod gets, in the
#: order of its requests, each with the extended resource it was asked as
ASSIGNED_DEVICES = f"{DOMAIN}/assigned-devices"
#: Pod annotation written with :data:`ASSIGNED_DEVICES`: ``<node>/<pod uid>``, the node and
#: the pod the assignment was made for (the device plugin honours it for that pod alone)
ASSIGNED_FOR = f"{DOMAIN}/assigned-for"
#: Pod annotation: ``allocating`` when the scheduler has assigned devices, ``allocated``
#: once the device plugin's Allocate has handed them to the container
ASSIGN_PHASE = f"{DOMAIN}/assign-phase"

#: Pod annotation: a share of one device in milli-units (``"300"``). ``<DEVICE_SHARE>.<class>``
#: (``hetsched.io/share.gpu``) is the share of that class; the bare one applies to the pod's
#: shared slots, or to its only device class (see :mod:`hetsched.k8s.podrequest`)
DEVICE_SHARE = f"{DOMAIN}/share"
#: The share the scheduler counts for a shared-device slot whose pod names none: a tenth
#: of the device, never the whole device. The device plugin gives a slot nobody assigned
#: its even part of the device (1000 / its ``shared_slots``), which is this share with 10
#: slots per device; with another slot count, pods name their share
#: (``hetsched.io/share``) so that the scheduler counts what the container gets
DEFAULT_SLOT_SHARE = 100
#: Pod annotation: a CEL selector over device attributes (DRA syntax);
#: ``<DEVICE_SELECTOR>.<class>`` is one for that class alone
DEVICE_SELECTOR = f"{DOMAIN}/selector"

#: Pod label: the pod group (gang) the pod belongs to
POD_GROUP = f"{DOMAIN}/pod-group"
#: Pod annotation: how many pods of the group must start together (the gang minimum)
POD_GROUP_MIN = f"{DOMAIN}/min-available"
#: Pod annotation: ``"true"``: the pod group is elastic (docs/elastic.md): it starts with as
#: many of its pods as fit (at least ``min-available``), binds more on idle capacity, and
#: is shrunk (its last pods deleted) before anyone is preempted
POD_GROUP_ELASTIC = f"{DOMAIN}/elastic"

#: Pod annotations: where the job's pods go in the network (docs/kubernetes.md): all inside
#: one domain of a level (a node label), or one if any fits; slices of N pods, each inside
#: one domain of another level. Kueue's PodSet annotations are read the same way
TOPOLOGY_REQUIRED = f"{DOMAIN}/topology-required"
TOPOLOGY_PREFERRED = f"{DOMAIN}/topology-preferred"
TOPOLOGY_SLICE_SIZE = f"{DOMAIN}/topology-slice-size"
TOPOLOGY_SLICE_REQUIRED = f"{DOMAIN}/topology-slice-required"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
#: Pod label: the hetsched queue the pod is charged to (default: its namespace)
QUEUE = f"{DOMAIN}/queue"
#: Pod annotations: the job's speed model (docs/heterogeneity.md): rates per device model
#: (``A100:3.1;V100:1``), its job type in the profile's throughput table, and its work
#: (``1.2e6`` steps or ``2h@V100``)
SPEED = f"{DOMAIN}/speed"
SPEED_JOB_TYPE = f"{DOMAIN}/job-type"
SPEED_WORK = f"{DOMAIN}/work"

#: Pod annotation: the job saves its state (docs/checkpointing.md), as a JSON or YAML flow
#: object ``{interval_s, notice_s, signal, cost_s, dir}``: it gets a preemption notice of
#: ``notice_s`` before its pod is deleted, and its replacement pods are told where to resume
CHECKPOINT = f"{DOMAIN}/checkpoint"
#: Pod annotation written by the pod itself (``hetsched checkpoint`` in the container): the
#: last checkpoint it saved, ``{"step": N, "path": "...", "time": "<RFC 3339>"}``
CHECKPOINTED = f"{DOMAIN}/checkpointed"
#: Pod annotation written by the scheduler when it gives the pod a preemption notice: the
#: deadline (RFC 3339, UTC) after which the pod is deleted
PREEMPTION_NOTICE = f"{DOMAIN}/preemption-notice"
#: Pod condition type set with :data:`PREEMPTION_NOTICE` (status True, the reason and the
#: deadline in its message)
NOTICE_CONDITION = f"{DOMAIN}/PreemptionNotice"
#: Pod annotations written in the Binding of a checkpointable job's pods (read in the
#: container through downward API env vars): the checkpoint it resumes from, the step it
#: reached, and the job's checkpoint folder (the ``dir`` of :data:`CHECKPOINT`)
RESUME_FROM = f"{DOMAIN}/resume-from"
RESUME_STEP = f"{DOMAIN}/resume-step"
CHECKPOINT_DIR = f"{DOMAIN}/checkpoint-dir"
