"""``status.nominatedNodeName``: where a preemptor's pods will go once their victims are gone.

kube-scheduler writes it on a pod whose preemption it started, so that every scheduler
(itself on its next cycles, another one, an autoscaler) sees the room being freed as
promised to that pod rather than free. The hetsched scheduler does the same:

- when the core preempts for a job, each of the job's pending pods is nominated to a node
  its victims ran on (the victims' distinct nodes, in the order they were stopped, handed
  to the job's pods in name order, round robin when the pods outnumber the nodes);
- the nomination is cleared when the pod binds, and when the core gives up on it: the job
  no longer waits with room kept for it (its victims are gone and it still does not fit,
  or it was cancelled or rejected).

Writes go to the ``pods/status`` subresource as merge patches; a failed write is logged
and tried again at the next change (a nomination is a hint, never a reason to stop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from hetsched.k8s.api import ApiError, ClusterAPI

__all__ = ["Nominations"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def _where(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


class Nominations:
    """The nominations this scheduler wrote, by pod key. Used from the scheduling thread."""

    def __init__(self, api: ClusterAPI) -> None:
        self.api = api
        #: pod key -> the node written in its ``status.nominatedNodeName``
        self.nodes: dict[str, str] = {}
        #: preemptor job id -> its victims' nodes, collected during one batch
        self._victims: dict[str, list[str]] = {}

    def victim(self, preemptor: str, node: str) -> None:
        """A victim of job ``preemptor`` is being stopped on ``node``."""
        nodes = self._victims.setdefault(preemptor, [])
        if node not in nodes:
            nodes.append(node)

    def apply(
        self,
        pending_pods: Callable[[str], list[str]],
        waits_for_room: Callable[[str], bool],
        job_of: Mapping[str, tuple[str, int]],
    ) -> None:
        """At the end of a batch: nominate the pending pods of this batch's preemptors, and
        clear the nominations of pods whose job no longer waits for room kept for it.

        ``pending_pods(job)`` lists a job's unbound pods; ``waits_for_room(job)`` says
        whether the core still keeps room for it; ``job_of`` maps pod keys to their jobs."""
        victims, self._victims = self._victims, {}
        for job_id, nodes in victims.items():
            if not waits_for_room(job_id):
                continue  # it started already (its victims were gone at once)
            for i, key in enumerate(sorted(pending_pods(job_id))):
                self._write(key, nodes[i % len(nodes)])
        for key in sorted(self.nodes):
            owned = job_of.get(key)
            if owned is None or not waits_for_room(owned[0]):
                self.clear(key)

    def clear(self, key: str) -> None:
        """Remove pod ``key``'s nomination, if this scheduler wrote one (a pod that bound,
        or one given up on)."""
        if key in self.nodes:
            self._write(key, None)

    def forget(self, key: str) -> None:
        """The pod is gone: nothing to clear."""
        self.nodes.pop(key, None)

    def _write(self, key: str, node: str | None) -> None:
        if self.nodes.get(key) == node:
            return
        namespace, name = _where(key)
        try:
            self.api.patch_pod_status(namespace, name, {"status": {"nominatedNodeName": node}})
        except ApiError as exc:
            if exc.status == 404:
                self.nodes.pop(key, None)
                return
            log.warning("cannot set the nominated node of pod %s: %s", key, exc)
            return
        if node is None:
            self.nodes.pop(key, None)
        else:
            self.nodes[key] = node
