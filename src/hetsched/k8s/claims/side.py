"""Dynamic Resource Allocation inside the Kubernetes scheduler's loop: the glue between the
scheduler (:mod:`hetsched.k8s.scheduler`) and its :class:`~hetsched.k8s.claims.book.ClaimBook`.

Per batch of changes, on the scheduling thread:

1. ResourceSlices, DeviceClasses and ResourceClaims update the book's caches; new slices
   refresh the inventory, and each node's devices are compared with what the core has:
   DeviceAdded for a new device, DeviceHealthChanged for one whose health changed or that
   left its pool (``removed``);
2. pods waiting for their claims are looked at again after any such change;
3. after the core ran, claim jobs are started for allocated claims no pod's job holds, and
   ended for claims deallocated (:meth:`ClaimSide.reconcile`).

A pod of ours that is deleted or ends gives its claims back (``reservedFor``, and the
allocation of claims nobody reserves any more) through
:func:`hetsched.k8s.claims.writes.release`.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from hetsched.drivers import Exit
from hetsched.k8s.claims.book import NODE_LABEL, ClaimBook
from hetsched.k8s.claims.writes import FINALIZER, ClaimWrite, release
from hetsched.k8s.translate import TranslateError, node_from_k8s
from hetsched.keys import TaskKey
from hetsched.model.device import Health, Node
from hetsched.scheduler import DeviceAdded, DeviceHealthChanged, Event

if TYPE_CHECKING:
    from hetsched.cluster.placement import Placement
    from hetsched.drivers import Interpreter
    from hetsched.k8s.api import ClusterAPI
    from hetsched.model.job import Job


class _Holder(Protocol):
    def hold(self, job: Job, placement: Placement) -> bool: ...


class PodScheduler(Protocol):
    """What the DRA side reads and calls of the Kubernetes scheduler
    (:class:`hetsched.k8s.scheduler.PodScheduler`), named here so this module does not
    import it back."""

    api: ClusterAPI
    pods: dict[str, dict[str, Any]]
    owner: dict[str, tuple[str, int]]
    interpreter: Interpreter

    @property
    def takeback(self) -> _Holder: ...


__all__ = ["DRA_RESOURCES", "ClaimSide", "device_events"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: the resource.k8s.io/v1 resources the scheduler lists and watches
DRA_RESOURCES = ("resourceclaims", "resourceslices", "deviceclasses")


def device_events(old: Node, new: Node, source: str) -> list[Event]:
    """What changed in a node's devices, as core events: new devices, health changes, and
    devices gone (unhealthy, ``removed``)."""
    events: list[Event] = []
    known = {d.id: d for d in old.devices}
    present = {d.id for d in new.devices}
    for device in new.devices:
        before = known.get(device.id)
        if before is None:
            events.append(DeviceAdded(new.name, device))
        elif before.health != device.health:
            events.append(DeviceHealthChanged(device.id, device.health, source))
    for device_id, before in known.items():
        if device_id not in present and before.health is Health.HEALTHY:
            events.append(DeviceHealthChanged(device_id, Health.UNHEALTHY, "removed"))
    return events


class ClaimSide:
    """See the module docstring."""

    def __init__(self, sched: PodScheduler) -> None:
        self.sched = sched
        self.book = ClaimBook()
        #: pods waiting for their claims (created, allocated by another pod, or for a
        #: device to be published), looked at again after any DRA change
        self.waiting: set[str] = set()
        #: claim key -> the id of its running claim job
        self._jobs: dict[str, str] = {}
        self._seq = itertools.count()
        #: something claim jobs depend on changed since the last reconcile
        self._dirty = True

    @property
    def caches(self) -> dict[str, dict[str, Obj]]:
        book = self.book
        return {
            "resourceclaims": book.claims,
            "resourceslices": book.slices,
            "deviceclasses": book.classes,
        }

    # -- changes -------------------------------------------------------------------------

    def apply(self, changes: list[tuple[str, str, Obj]]) -> tuple[bool, bool]:
        """Apply the DRA objects' changes to the caches: (any came, a slice changed). The
        caller looks at the waiting pods again after any, and calls
        :meth:`devices_changed` after a slice's."""
        caches = self.caches
        slices = False
        for resource, kind, obj in changes:
            cache = caches.get(resource)
            if cache is None:
                continue
            meta = obj.get("metadata") or {}
            key = str(meta.get("name") or "")
            if resource == "resourceclaims":
                key = f"{meta.get('namespace') or 'default'}/{key}"
            if kind == "DELETED":
                cache.pop(key, None)
            else:
                cache[key] = obj
            if resource == "resourceclaims":
                self.book.claim_changed(key, None if kind == "DELETED" else obj)
            slices = slices or resource == "resourceslices"
        if slices:
            self.book.refresh()
        came = any(r in caches for r, _, _ in changes)
        self._dirty = self._dirty or came
        return came, slices

    def node(self, obj: Obj) -> Node:
        """A core/v1 Node as the core's node: the device plugin's devices and the slices'
        (raises TranslateError like :func:`~hetsched.k8s.translate.node_from_k8s`)."""
        node = node_from_k8s(obj)
        extra = self.book.node_devices(node.name)
        labels = {**node.labels, NODE_LABEL: node.name}
        return dataclasses.replace(node, devices=node.devices + extra, labels=labels)

    def devices_changed(self, models: dict[str, Node], nodes: Mapping[str, Obj]) -> list[Event]:
        """The slices changed: each known node's devices again, as events."""
        events: list[Event] = []
        for name, old in sorted(models.items()):
            obj = nodes.get(name)
            if obj is None:
                continue
            try:
                new = self.node(obj)
            except TranslateError:
                continue
            models[name] = new
            events += device_events(old, new, "resource slice")
        return events

    # -- pods that ended -----------------------------------------------------------------

    def ended(self, obj: Obj) -> None:
        """A pod of ours is gone or has ended: give its claims back."""
        writes = self.book.releases(obj)
        if writes:
            release(self.sched.api, writes, obj)  # type: ignore[arg-type]
        key = f"{(obj.get('metadata') or {}).get('namespace') or 'default'}/"
        key += str((obj.get("metadata") or {}).get("name"))
        self.book.forget(key)
        self.waiting.discard(key)
        self._dirty = True

    def sweep(self) -> None:
        """After a (re)start's list: pods deleted while this scheduler was not watching
        leave the ``reservedFor`` of the claims it allocated (so a claim nobody reserves
        any more is deallocated); a watch would have said they went, a restart does not."""
        live = {str((p.get("metadata") or {}).get("uid") or "") for p in self.sched.pods.values()}
        for key, claim in sorted(self.book.claims.items()):
            meta = claim.get("metadata") or {}
            if FINALIZER not in (meta.get("finalizers") or []):
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            gone = [
                str(r.get("uid"))
                for r in reserved
                if r.get("resource") == "pods" and str(r.get("uid") or "") not in live
            ]
            namespace, _, name = key.partition("/")
            write = ClaimWrite(namespace, name, str(meta.get("uid") or ""))
            for uid in gone:
                log.info("ResourceClaim %s: pod %s is gone; released", key, uid)
                release(self.sched.api, [write], {"metadata": {"uid": uid}})  # type: ignore[arg-type]
            if not reserved:
                # ours but reserved by no pod: a binding cut short by the restart
                release(self.sched.api, [write], {"metadata": {"uid": ""}})  # type: ignore[arg-type]

    # -- claim jobs ----------------------------------------------------------------------

    def reconcile(self) -> list[Event]:
        """Start the claim jobs allocated claims need, end those no longer needed; the
        events of the ended ones are for the core."""
        if not self._dirty:
            return []  # no claim, slice or owner changed: the claim jobs stand
        self._dirty = False
        sched = self.sched
        running = {key: key in sched.owner for key in self.book.owners.values()}
        wanted = self.book.held(running)
        events: list[Event] = []
        for claim_key, job_id in list(self._jobs.items()):
            if wanted.get(claim_key) is None:
                del self._jobs[claim_key]
                exit_ = Exit(TaskKey(job_id, 0, 1), True, "claim deallocated")
                event = sched.interpreter.report(exit_)
                if event is not None:
                    events.append(event)
        for claim_key, need in wanted.items():
            if need is None or claim_key in self._jobs:
                continue
            job, placement = need
            job = dataclasses.replace(job, id=f"{job.id}~{next(self._seq)}")
            if sched.takeback.hold(job, placement):
                self._jobs[claim_key] = job.id
            else:
                self._dirty = True  # try again at the next batch
        return events
