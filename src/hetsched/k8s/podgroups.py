"""Pod groups waiting to become jobs: the pods of one group (``hetsched.io/pod-group``) are
one job, submitted once ``hetsched.io/min-available`` of them exist; pods of a group that
arrive after it started are submitted one by one. Task ``i`` of the job is its ``i``-th pod
by Indexed Job completion index, then by name (the order placement keeps ranks together
in)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hetsched.k8s.podrequest import str_map
from hetsched.k8s.topology import rank_key
from hetsched.k8s.translate import pod_info

__all__ = ["PodGroups"]

Obj = dict[str, Any]


def _rank(obj: Obj, key: str) -> tuple[int, int, str]:
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return rank_key(str_map(annotations, "metadata.annotations"), key)


class PodGroups:
    """Pods waiting for their group's minimum, by group id (``namespace/group``)."""

    def __init__(self) -> None:
        self.waiting: dict[str, list[str]] = {}
        #: groups whose first job was submitted
        self.started: set[str] = set()

    def add(self, group: str, key: str) -> None:
        waiting = self.waiting.setdefault(group, [])
        if key not in waiting:
            waiting.append(key)

    def discard(self, key: str) -> bool:
        """Forget a deleted pod; False if it was not waiting."""
        for waiting in self.waiting.values():
            if key in waiting:
                waiting.remove(key)
                return True
        return False

    def again(self, group: str, key: str) -> None:
        """A pod of a job that was withdrawn before it started waits for its minimum again."""
        self.waiting.setdefault(group, []).append(key)
        self.started.discard(group)

    def ready(
        self, pods: Mapping[str, Obj], report: Callable[[Obj, str], None]
    ) -> Iterator[tuple[str, list[str], int]]:
        """(group, its waiting pods' keys, the gang minimum) of each group that may become
        a job now; ``report`` tells the pods of the others why they wait. A group yielded
        is taken (call :meth:`ready` only when its job is submitted)."""
        for group, waiting in sorted(self.waiting.items()):
            if not waiting:
                continue
            infos = [pod_info(pods[k]) for k in waiting]
            minimum = 1 if group in self.started else max((i.min_available or 1) for i in infos)
            if len(waiting) < minimum:
                for key in waiting:
                    text = (
                        f"waiting for pod group {group}: {len(waiting)} of the "
                        f"{minimum} pods it needs exist"
                    )
                    report(pods[key], text)
                continue
            yield group, sorted(waiting, key=lambda k: _rank(pods[k], k)), minimum

    def take(self, group: str) -> None:
        """The group's waiting pods became a job."""
        self.waiting[group] = []
        self.started.add(group)
