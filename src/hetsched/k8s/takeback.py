"""Bound pods taken back as jobs of the core: what they hold, and which job they are.

A pod bound before this scheduler started (by it before a restart, or by another
scheduler) holds its node's capacity; the core is told with ``Scheduler.restore``. These
pure functions say what to restore: the placement a bound pod holds, and the job a pod, or
the bound pods of a pod group (one job: the gang they were), are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from hetsched.cluster.assign import assign_devices
from hetsched.cluster.placement import Placement
from hetsched.cluster.state import ClusterState
from hetsched.k8s.translate import TranslateError, group_job, pod_info, pod_request
from hetsched.k8s.translate import restored_placement as annotated_placement
from hetsched.model.job import Job

__all__ = ["group_restore", "held_placement"]

JSON = Mapping[str, Any]


def held_placement(cluster: ClusterState, obj: JSON) -> Placement | None:
    """What a bound pod holds on its node (None: the node is not known): its cpu, memory
    and the devices of its assignment annotation; without a valid one, devices of the kinds
    it asked for that are free there now."""
    placement = annotated_placement(obj)
    if placement is None or placement.node not in cluster.node_index:
        return None
    request = pod_request(obj)
    wanted = sum(d.primary.count for d in request.devices)
    if wanted and (len(placement.devices) != wanted or cluster.check(placement) is not None):
        row = cluster.row(placement.node)
        chosen = assign_devices(cluster, row, request, "most_used")
        placement = dataclasses.replace(placement, devices=tuple(chosen or ()))
    return placement


def group_restore(
    job_id: str, pods: Sequence[JSON], cluster: ClusterState, scheduler_name: str, now: float
) -> tuple[Job, dict[int, Placement]] | None:
    """The bound pods of one group as one job (task ``i`` is ``pods[i]``) and what each
    holds; None when they cannot be one job (they ask for different resources, or a node
    is unknown). Pods another scheduler bound make the job not preemptible."""
    infos = [pod_info(obj) for obj in pods]
    minimum = max(info.min_available or 1 for info in infos)
    try:
        job = group_job(job_id, pods, minimum, now)
    except TranslateError:
        return None
    placements: dict[int, Placement] = {}
    for task, obj in enumerate(pods):
        placement = held_placement(cluster, obj)
        if placement is None:
            return None
        placements[task] = placement
    if any(info.scheduler_name != scheduler_name for info in infos):
        job = dataclasses.replace(job, preemptible=False)
    return job, placements
