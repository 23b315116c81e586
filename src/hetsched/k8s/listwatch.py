"""List and watch the objects the Kubernetes scheduler reacts to: nodes and pods, and the
resource.k8s.io/v1 objects of Dynamic Resource Allocation.

One watch thread per resource feeds one queue; the scheduler drains it on its own thread.
A watch that expires (410) relists, and the relist becomes the changes that bring the
scheduler's cache to the listed objects; a dropped connection is retried with backoff. An
optional resource the API server does not serve (404: DRA on a cluster older than 1.34)
is neither listed nor watched.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from hetsched.k8s.api import ApiError, ClusterAPI, WatchExpired

__all__ = ["Change", "ListWatch"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
#: a change of one object: (resource, ADDED/MODIFIED/DELETED, object)
Change = tuple[str, str, Obj]
#: what a watch thread queues: a change, or (resource, "RELIST", all objects)
_Item = Change | tuple[str, str, list[Obj]]


#: resources whose objects are namespaced (cached by ``namespace/name``)
_NAMESPACED = frozenset({"pods", "resourceclaims"})


class ListWatch:
    """The resources of ``caches`` in ``api``; ``caches`` maps each resource to the
    scheduler's cache of it (name, or namespace/name for namespaced ones, to the object),
    which relists are compared to. ``optional`` resources may be missing on the server."""

    def __init__(
        self,
        api: ClusterAPI,
        caches: Mapping[str, Mapping[str, Obj]],
        timeout_s: int,
        optional: Iterable[str] = (),
    ) -> None:
        self.api = api
        self.caches = caches
        self.timeout_s = timeout_s
        self.optional = frozenset(optional)
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        #: resource -> the resource version to watch from
        self.rv: dict[str, str] = dict.fromkeys(caches, "")
        #: optional resources the server does not serve
        self.missing: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _list(self, resource: str) -> tuple[list[Obj], str]:
        if resource == "nodes":
            return self.api.list_nodes()
        if resource == "pods":
            return self.api.list_pods()
        lister: Any = getattr(self.api, "list_objects", None)
        if lister is None:
            raise ApiError(404, f"this client cannot list {resource}")
        items, rv = lister(resource)
        return list(items), str(rv)

    def snapshot(self) -> list[Change]:
        """Everything there is now, as the changes from the caches to it (optional
        resources first: a pod's claims are known before the pod)."""
        changes: list[Change] = []
        ordered = sorted(self.caches, key=lambda r: (r not in self.optional, r == "pods"))
        for resource in ordered:
            try:
                items, self.rv[resource] = self._list(resource)
            except ApiError as exc:
                if resource not in self.optional or exc.status != 404:
                    raise
                if resource not in self.missing:
                    log.info("the API server does not serve %s: not used", resource)
                self.missing.add(resource)
                continue
            self.missing.discard(resource)
            changes += self.diff(resource, items)
        return changes

    def start(self) -> None:
        self._stop.clear()
        for resource in [r for r in self.caches if r not in self.missing]:
            thread = threading.Thread(
                target=self._watch, args=(resource,), name=f"watch-{resource}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=0.5)
        self._threads = [t for t in self._threads if t.is_alive()]

    def changes(self, timeout_s: float) -> list[Change]:
        """Wait up to ``timeout_s`` for a change, then take every change queued."""
        out: list[Change] = []
        try:
            item = self._queue.get(timeout=timeout_s)
            while True:
                out += self._unpack(item)
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return out

    def wake(self) -> None:
        """Make a waiting :meth:`changes` return now (something besides a change needs the
        scheduler: a binding finished). Safe from any thread."""
        self._queue.put(("", "WAKE", []))

    def _watch(self, resource: str) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                for event in self.api.watch(resource, self.rv[resource], self.timeout_s):
                    if self._stop.is_set():
                        return
                    rv = event.object.get("metadata", {}).get("resourceVersion")
                    if rv:
                        self.rv[resource] = str(rv)
                    self._queue.put((resource, event.type, event.object))
                backoff = 0.5
            except WatchExpired:
                log.info("watch of %s expired; relisting", resource)
                try:
                    items, rv = self._list(resource)
                except ApiError as exc:
                    log.warning("relist of %s failed: %s", resource, exc)
                    self._stop.wait(backoff)
                    continue
                self.rv[resource] = rv
                self._queue.put((resource, "RELIST", items))
            except Exception as exc:  # a dropped connection must not end the watch
                log.warning("watch of %s failed: %s; retrying", resource, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _unpack(self, item: _Item) -> list[Change]:
        resource, kind, payload = item
        if kind == "WAKE":
            return []
        if kind == "RELIST":
            assert isinstance(payload, list)
            return self.diff(resource, payload)
        assert isinstance(payload, dict)
        return [(resource, kind, payload)]

    def diff(self, resource: str, items: Iterable[Obj]) -> list[Change]:
        """Changes that bring the cache of ``resource`` to ``items`` (a full list)."""
        cache = self.caches[resource]
        seen: dict[str, Obj] = {}
        for obj in items:
            meta = obj.get("metadata", {})
            key = meta.get("name", "")
            if resource in _NAMESPACED:
                key = f"{meta.get('namespace') or 'default'}/{key}"
            seen[key] = obj
        changes: list[Change] = [(resource, "DELETED", cache[k]) for k in cache if k not in seen]
        for key, obj in seen.items():
            changes.append((resource, "MODIFIED" if key in cache else "ADDED", obj))
        return changes
