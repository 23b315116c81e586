"""Preemption notices on pods: how the Kubernetes scheduler tells a checkpointable job's pod
that it will be deleted, and when.

A stop with a notice (a Preempt or Migrate of a job with a ``hetsched.io/checkpoint``
declaration) does not delete the pod at once. The scheduler first writes on the pod

- the annotation ``hetsched.io/preemption-notice``: the deadline, RFC 3339 in UTC;
- the condition ``hetsched.io/PreemptionNotice`` (status True, reason ``Preempted``,
  ``Migrating`` or ``Stopping``, the deadline and the reason in its message), through
  ``pods/status``;
- a ``PreemptionNotice`` Event;

and deletes the pod (with the stop's grace period: SIGTERM, then SIGKILL) once the deadline
has passed, or at once when the pod reports a checkpoint inside the notice (the
interpreter's second Stop with no notice), or when its container ends meanwhile.

A restarted scheduler does not know the notices given before: a pod taken back with one
has it withdrawn (:meth:`Notices.withdraw`), and gets a new one if it must still stop.

The scheduler sends the container no signal: Kubernetes has no API to signal a container
short of ``pods/exec`` (a shell in the image and a broad right), so the notice is what the
pod can read of itself (docs/checkpointing.md says how).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hetsched.k8s.api import ApiError, ClusterAPI
from hetsched.k8s.checkpoints import format_time
from hetsched.k8s.names import CHECKPOINTED, NOTICE_CONDITION, PREEMPTION_NOTICE
from hetsched.k8s.podevents import PodEvents
from hetsched.k8s.translate import PodInfo
from hetsched.keys import TaskKey

__all__ = ["Notice", "Notices"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Notice:
    """A pod in its notice: the task it runs and how it is deleted once the notice ends."""

    task: TaskKey
    #: when the notice ends, on the scheduler's clock
    deadline: float
    grace_s: float
    why: str
    preempted: bool


def _reason(notice: Notice) -> str:
    """The condition's reason: a Migrate's stops say "migrating" (docs/checkpointing.md)."""
    if notice.why.startswith("migrating"):
        return "Migrating"
    return "Preempted" if notice.preempted else "Stopping"


class Notices:
    """The pods in their notice, by pod key. ``wall`` is the wall clock the deadline is
    written in (the scheduler's own clock may be monotonic)."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self.wall = wall
        self.pending: dict[str, Notice] = {}

    def give(
        self,
        api: ClusterAPI,
        events: PodEvents,
        obj: dict[str, Any],
        info: PodInfo,
        notice: Notice,
        notice_s: float,
    ) -> None:
        """Start ``notice`` on pod ``info`` (``notice_s`` from now): the annotation, the
        condition and the Event of the module docstring. A write that fails is logged: the
        pod is still deleted at the deadline."""
        self.pending[info.key] = notice
        deadline = format_time(math.ceil(self.wall() + notice_s))
        message = (
            f"{notice.why}; checkpoint before {deadline} ({notice_s:g}s): the pod is deleted "
            f"then, or as soon as it reports a checkpoint (annotation {CHECKPOINTED})"
        )
        condition = {
            "type": NOTICE_CONDITION,
            "status": "True",
            "reason": _reason(notice),
            "message": message,
            "lastTransitionTime": format_time(self.wall()),
        }
        annotation = {"metadata": {"annotations": {PREEMPTION_NOTICE: deadline}}}
        status = {"status": {"conditions": [condition]}}
        for write, patch in ((api.patch_pod, annotation), (api.patch_pod_status, status)):
            try:
                write(info.namespace, info.name, patch)
            except ApiError as exc:
                log.warning("pod %s: writing its preemption notice failed: %s", info.key, exc)
        events.post(obj, "Normal", "PreemptionNotice", message)

    def withdraw(self, api: ClusterAPI, info: PodInfo, obj: dict[str, Any]) -> None:
        """Pod ``info`` carries a notice this scheduler does not hold (it was given before a
        restart, which forgets it): the pod runs on, so the annotation goes and the
        condition turns False (a fresh notice comes if the pod must still stop)."""
        meta = obj.get("metadata") or {}
        if PREEMPTION_NOTICE not in (meta.get("annotations") or {}) or info.key in self.pending:
            return
        condition = {
            "type": NOTICE_CONDITION,
            "status": "False",
            "reason": "Withdrawn",
            "message": "the scheduler restarted and no longer stops this pod; a new notice "
            "comes if it must still stop",
            "lastTransitionTime": format_time(self.wall()),
        }
        annotation = {"metadata": {"annotations": {PREEMPTION_NOTICE: None}}}
        status = {"status": {"conditions": [condition]}}
        for write, patch in ((api.patch_pod, annotation), (api.patch_pod_status, status)):
            try:
                write(info.namespace, info.name, patch)
            except ApiError as exc:
                log.warning("pod %s: withdrawing its preemption notice failed: %s", info.key, exc)

    def end(self, key: str) -> Notice | None:
        """The pod's notice ends now (it reported a checkpoint, or it ended): the notice,
        for the deletion; None when it had none."""
        return self.pending.pop(key, None)

    def shorten(self, key: str, deadline: float) -> None:
        """A later stop with a shorter notice: the pod is deleted by ``deadline``."""
        notice = self.pending.get(key)
        if notice is not None:
            notice.deadline = min(notice.deadline, deadline)

    def due(self, now: float) -> list[tuple[str, Notice]]:
        """The notices over at ``now`` (taken out), in deadline order."""
        over = sorted(
            ((k, n) for k, n in self.pending.items() if n.deadline <= now),
            key=lambda item: (item[1].deadline, item[0]),
        )
        for key, _ in over:
            del self.pending[key]
        return over

    def next_deadline(self) -> float | None:
        return min((n.deadline for n in self.pending.values()), default=None)
