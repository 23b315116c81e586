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
from hetsched.model.workflow import parse_array, split_element

__all__ = [
    "MEMBER_LABEL",
    "as_one_task",
    "element_submission",
    "member_body",
    "submission_of",
]

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
    # what it waited for has ended here (the federation held it): the member's ids differ
    left_out = ("user", "id", "submit_time", "after", "on_unmet")
    body = {k: v for k, v in submission.items() if k not in left_out}
    body["queue"] = queue
    body["federation"] = federation
    body["restart_policy"] = "never"
    body["max_restarts"] = 0
    resources = dict(body.get("resources") or {})
    for key in ("node_selector", "nodeSelector"):
        resources.pop(key, None)
    body["resources"] = resources
    return body


def element_submission(
    submission: Mapping[str, Any], array_id: str, index: int, size: int
) -> dict[str, Any]:
    """The submission of element ``index`` of an array: the array's, as one job that is
    told its index and the array's size (a member runs it as a job of its own)."""
    body = {k: v for k, v in submission.items() if k != "array"}
    body["env"] = {
        **dict(submission.get("env") or {}),
        "HETSCHED_ARRAY_JOB_ID": array_id,
        "HETSCHED_ARRAY_INDEX": str(index),
        "HETSCHED_ARRAY_SIZE": str(size),
    }
    return body


def submission_of(submissions: Mapping[str, dict[str, Any]], job_id: str) -> dict[str, Any] | None:
    """A job's submission; for an element of an array (which the core created), its
    array's, as the element (after a restart the element's own row holds the array's
    spec as well)."""
    found = submissions.get(job_id)
    split = split_element(job_id)
    if split is None:
        return found
    parent = submissions.get(split[0], found)
    if parent is None or parent.get("array") is None:
        return found
    size = len(parse_array(str(parent["array"])))
    return element_submission(parent, split[0], split[1], size)
