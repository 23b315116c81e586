"""Bound pods taken back as jobs of the core: what they hold, and which job they are.

A pod bound before this scheduler started (by it before a restart, or by another
scheduler) holds its node's capacity; the core is told with ``Scheduler.restore``. These
pure functions say what to restore: the placement a bound pod holds, and the job a pod, or
the bound pods of a pod group (one job: the gang they were), are.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from hetsched.cluster.assign import assign_devices
from hetsched.cluster.placement import Placement
from hetsched.cluster.state import AllocationError, ClusterState
from hetsched.k8s.translate import (
    PodInfo,
    TranslateError,
    group_job,
    pod_info,
    pod_job,
    pod_request,
)
from hetsched.k8s.translate import restored_placement as annotated_placement
from hetsched.model.job import Job

if TYPE_CHECKING:
    from hetsched.scheduler import Scheduler


class PodScheduler(Protocol):
    """What taking pods back reads and calls of the Kubernetes scheduler
    (:class:`hetsched.k8s.scheduler.PodScheduler`), named here so this module does not
    import it back."""

    name: str
    pods: dict[str, dict[str, Any]]
    core: Scheduler
    clock: Callable[[], float]

    def group_started(self, group: str) -> None: ...

    def adopt(
        self, job_id: str, keys: list[str], placements: dict[int, Placement], workload: str | None
    ) -> None: ...


log = logging.getLogger(__name__)

__all__ = ["TakeBack", "group_restore", "held_placement"]

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


def _short(uid: str) -> str:
    return f"#{uid[:8]}" if uid else ""


class TakeBack:
    """Takes bound pods back into ``sched``'s core: one pod at a time, the bound pods of a
    pod group together (those seen during a sync, collected with :meth:`later`), and jobs
    with no pod (the claim jobs of :mod:`hetsched.k8s.claims.side`)."""

    def __init__(self, sched: PodScheduler) -> None:
        self.sched = sched
        #: pod group id -> keys of its bound pods, until :meth:`groups`
        self._waiting: dict[str, list[str]] = {}
        self._seq = itertools.count()

    def later(self, group: str, key: str) -> None:
        self._waiting.setdefault(group, []).append(key)

    def groups(self) -> None:
        """The bound pods of a pod group seen in one batch (after a restart: all of them)
        are taken back as one job, the gang they were; a group that cannot be (its pods ask
        for different resources) is taken back pod by pod."""
        sched = self.sched
        groups, self._waiting = self._waiting, {}
        for group, keys in sorted(groups.items()):
            objs = [sched.pods[k] for k in sorted(keys) if k in sched.pods]
            if not self._group(group, objs):
                for obj in objs:
                    self.pod(pod_info(obj), obj)
            sched.group_started(group)

    def _group(self, group: str, objs: list[dict[str, Any]]) -> bool:
        sched = self.sched
        job_id = f"{group}#r{next(self._seq)}"
        restored = group_restore(job_id, objs, sched.core.view.cluster, sched.name, sched.clock())
        if restored is None:
            return False
        job, placements = restored
        try:
            sched.core.restore(job, 1, placements, now=sched.clock())
        except AllocationError as exc:
            log.warning("cannot account pod group %s as one job: %s", group, exc)
            return False
        sched.adopt(job.id, [pod_info(o).key for o in objs], placements, f"group:{group}")
        return True

    def pod(self, info: PodInfo, obj: dict[str, Any]) -> None:
        """Account a bound pod we did not bind in this life: it holds its node's capacity."""
        sched = self.sched
        placement = held_placement(sched.core.view.cluster, obj)
        if placement is None:
            return
        job = pod_job(obj, f"{info.key}{_short(info.uid)}@{info.node_name}")
        if info.scheduler_name != sched.name:
            job = dataclasses.replace(job, preemptible=False)
        held = sched.core.view.job(job.id)
        if held is not None:
            if held.placements:
                return  # accounted already
            # accounted before and released since (an assumption the extender took back):
            # the ended record keeps its id, so this takes a fresh one
            job = dataclasses.replace(job, id=f"{job.id}~{next(self._seq)}")
        try:
            sched.core.restore(job, 1, {0: placement}, now=sched.clock())
        except AllocationError as exc:
            log.warning("cannot account bound pod %s: %s", info.key, exc)
            return
        sched.adopt(job.id, [info.key], {0: placement}, None)

    def hold(self, job: Job, placement: Placement) -> bool:
        """Restore a job that holds ``placement`` without a pod (a claim job); False when
        it does not fit now."""
        sched = self.sched
        try:
            sched.core.restore(job, 1, {0: placement}, now=sched.clock())
        except (AllocationError, ValueError) as exc:
            log.info("cannot hold %s yet: %s", job.id, exc)
            return False
        sched.adopt(job.id, [], {0: placement}, None)
        return True
