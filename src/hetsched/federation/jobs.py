"""A federation's job as its core places it, and as a member receives it.

A job runs on one member as a whole: a gang split over two clusters would talk over the
wide-area network, and a member's own scheduler places its tasks on its nodes. So the
federation's core holds each job as **one task** asking for all of the job's replicas at
once (``as_one_task``), and the member it lands on receives the job as submitted, with
``federation`` set and no restarts of its own (the federation's restart policy decides,
and may send it elsewhere).

``node_selector`` picks members by their labels at the federation; it is not passed on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hetsched.model.job import DeviceRequest, Job, TaskRequest

__all__ = ["MEMBER_LABEL", "as_one_task", "member_body"]

#: every member's node in the federation's core carries its name under this label, so a
#: job pins itself to a member with ``node_selector: {hetsched.io/member: NAME}``
MEMBER_LABEL = "hetsched.io/member"


def as_one_task(job: Job) -> Job:
    """``job`` as one task holding every replica's request: whole devices multiply their
    count, a share of one device becomes one request per replica. Its network topology is
    left to the member (its spec carries it there): a member is one node here."""
    if job.replicas == 1:
        return dataclasses.replace(job, gang=None, topology=None)
    request = job.resources
    devices: list[DeviceRequest] = []
    for device in request.devices:
        if len(device.choices) == 1 and device.primary.whole:
            choice = device.primary
            devices.append(
                DeviceRequest.of(
                    choice.device_class, choice.count * job.replicas, choice.share, choice.selector
                )
            )
        else:
            devices.extend([device] * job.replicas)
    whole = TaskRequest(
        request.cpu_milli * job.replicas,
        request.memory_mib * job.replicas,
        tuple(devices),
        request.node_selector,
        request.tolerations,
    )
    return dataclasses.replace(job, resources=whole, replicas=1, gang=None, topology=None)


def member_body(submission: Mapping[str, Any], federation: str, queue: str) -> dict[str, Any]:
    """What a member receives for a job: the submission as accepted, into the member's
    ``queue``, fenced by ``federation``'s lease, without restarts of its own and without
    the member selector (it chose the member)."""
    body = {k: v for k, v in submission.items() if k not in ("user", "id", "submit_time")}
    body["queue"] = queue
    body["federation"] = federation
    body["restart_policy"] = "never"
    body["max_restarts"] = 0
    resources = dict(body.get("resources") or {})
    for key in ("node_selector", "nodeSelector"):
        resources.pop(key, None)
    body["resources"] = resources
    return body
