"""Keeping this node's ResourceSlices in step with its devices.

The driver publishes one pool per node (named after the node) in as many slices as its
devices need (:func:`~hetsched.k8s.dra.devices.node_slices`). Whenever the devices change
(hot-plug, unplug, health) the pool gets the next **generation**, and every slice is
rewritten with it: a consumer uses only the slices of a pool's highest generation, and
takes the pool as complete once it has seen ``resourceSliceCount`` of them. A driver that
restarts continues from the highest generation it finds, so a generation is never reused.

A write that fails (the API server unreachable, a conflict) is logged and done again at the
next :meth:`SlicePublisher.publish`; the driver's loop also publishes now and then with
``force``, which repairs slices someone else removed (a kubelet deletes its node's slices
when it starts, and when a driver stays away too long).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from hetsched.k8s.dra.devices import dra_device, node_slices
from hetsched.model.device import Device

__all__ = ["SliceAPI", "SlicePublisher"]

log = logging.getLogger("hetsched.k8s.dra")

Obj = dict[str, Any]


class SliceAPI(Protocol):
    """The API server calls the publisher makes; each may raise (callers log and retry)."""

    def get_node(self, name: str) -> Obj | None: ...

    def list_resource_slices(self, field_selector: str = "") -> list[Obj]: ...

    def create_resource_slice(self, body: Obj) -> Obj: ...

    def replace_resource_slice(self, name: str, body: Obj) -> Obj | None:
        """None when the slice changed since it was read (409)."""
        ...

    def delete_resource_slice(self, name: str) -> None: ...


class SlicePublisher:
    def __init__(
        self, api: SliceAPI, driver: str, node: str, shareable: Sequence[str] = ()
    ) -> None:
        self.api = api
        self.driver = driver
        self.node = node
        self.shareable = tuple(shareable)
        #: the pool's generation last written; None until the first publish read the slices
        self.generation: int | None = None
        self._content: str | None = None
        self._owner: Obj | None = None
        self._lock = threading.Lock()

    def _key(self, devices: Sequence[Device]) -> str:
        sharing = set(self.shareable)
        listed = sorted(
            (dra_device(d, d.device_class in sharing) for d in devices), key=lambda d: d["name"]
        )
        return json.dumps(listed, sort_keys=True)

    def publish(self, devices: Iterable[Device], force: bool = False) -> bool:
        """Write the slices when the devices changed since the last successful write (or
        with ``force``); True when this call wrote them."""
        devices = list(devices)
        content = self._key(devices)
        with self._lock:
            if content == self._content and not force:
                return False
            try:
                self._write(devices, content)
            except Exception as exc:
                log.warning("cannot publish the ResourceSlices of node %s: %s", self.node, exc)
                return False
            self._content = content
            return True

    def _write(self, devices: list[Device], content: str) -> None:
        selector = f"spec.nodeName={self.node},spec.driver={self.driver}"
        existing = {s["metadata"]["name"]: s for s in self.api.list_resource_slices(selector)}
        if self.generation is None:
            found = [int(s["spec"]["pool"].get("generation") or 0) for s in existing.values()]
            self.generation = max(found, default=0)
            self._content = None
        generation = self.generation + (1 if content != self._content else 0)
        desired = node_slices(
            self.node, self.driver, devices, generation, self.shareable, self._node_owner()
        )
        for body in desired:
            name = body["metadata"]["name"]
            old = existing.pop(name, None)
            if old is None:
                self.api.create_resource_slice(body)
            elif old.get("spec") != body["spec"] or _owners(old) != _owners(body):
                body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
                if self.api.replace_resource_slice(name, body) is None:
                    raise RuntimeError(f"ResourceSlice {name} changed meanwhile")
        for name in existing:
            self.api.delete_resource_slice(name)
        if generation != self.generation:
            log.info(
                "published %d devices of node %s in %d ResourceSlice(s), generation %d",
                len(devices),
                self.node,
                len(desired),
                generation,
            )
        self.generation = generation

    def _node_owner(self) -> Obj | None:
        """The Node as the slices' owner, so they go with it (None while it is unknown)."""
        if self._owner is None:
            node = self.api.get_node(self.node)
            uid = (node or {}).get("metadata", {}).get("uid")
            if uid:
                self._owner = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.node,
                    "uid": uid,
                    "controller": True,
                }
        return self._owner

    def withdraw(self) -> None:
        """Delete this node's slices (the driver leaves the node for good)."""
        selector = f"spec.nodeName={self.node},spec.driver={self.driver}"
        for body in self.api.list_resource_slices(selector):
            self.api.delete_resource_slice(body["metadata"]["name"])


def _owners(body: Obj) -> list[Any]:
    return list((body.get("metadata") or {}).get("ownerReferences") or [])
