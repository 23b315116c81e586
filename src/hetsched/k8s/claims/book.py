"""The hetsched scheduler's view of Dynamic Resource Allocation: ResourceSlices,
DeviceClasses and ResourceClaims, and what it decided about the claims of its pods.

- The devices of the slices are devices of the core's nodes
  (:mod:`hetsched.k8s.claims.inventory`), next to the device plugin's.
- A pod's ``spec.resourceClaims`` name claims directly (``resourceClaimName``) or through a
  template, whose claim kube-controller-manager creates and names in the pod's
  ``status.resourceClaimStatuses``; the pod waits until every claim exists.
- A claim nobody allocated becomes device requests of the pod's task
  (:mod:`hetsched.k8s.claims.requests`): the core decides it. A claim already allocated (a
  shared claim another pod allocated, or one kube-scheduler did) asks for nothing more: the
  pod goes to the claim's node and is added to ``reservedFor``. Two pending pods of one
  unallocated claim: the first allocates it, the other waits for that allocation, until the
  claim's cache shows it (the watch can bring it after the binding's outcome).
- The devices of an allocated claim are held in the core once: by the job of the pod whose
  binding allocated it, while that job holds them; otherwise (a claim allocated before a
  restart, by kube-scheduler, or still reserved by other pods when its allocator ended) by a
  *claim job* of the core, ``claim:<namespace>/<name>``, on the claim's node, which ends when
  the claim is deallocated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.k8s.claims.inventory import Inventory, dra_id
from hetsched.k8s.claims.requests import (
    PLUGIN_ONLY,
    ClaimError,
    ClaimPlan,
    allocated_node,
    allocations,
    plan_claim,
)
from hetsched.k8s.claims.writes import FINALIZER, ClaimWrite
from hetsched.k8s.dra.devices import allocated_devices
from hetsched.model.device import Device
from hetsched.model.job import DeviceChoice, DeviceRequest, Job, TaskRequest

__all__ = ["NODE_LABEL", "ClaimBook", "PodClaims", "claim_refs"]

Obj = dict[str, Any]

#: a label of the core's nodes alone (never written to Kubernetes): the node's name, which
#: pins a pod to the node of the claims it shares
NODE_LABEL = "hetsched.io/node-name"


def claim_refs(obj: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """(name in the pod, ``namespace/claim`` or None while its claim is not created yet)
    of each of the pod's ``spec.resourceClaims``."""
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    statuses = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (obj.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(s, Mapping)
    }
    out: list[tuple[str, str | None]] = []
    for ref in (obj.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(ref, Mapping):
            continue
        name = str(ref.get("name") or "")
        claim = ref.get("resourceClaimName") or statuses.get(name)
        out.append((name, f"{namespace}/{claim}" if claim else None))
    return out


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The claims of one submitted pod: those its job allocates (their device requests
    follow the device plugin's ``plugin_devices`` devices in its placement) and those it
    only reserves."""

    plans: tuple[ClaimPlan, ...]
    reserve: tuple[ClaimWrite, ...]
    plugin_devices: int


def _plugin_only(request: DeviceRequest) -> DeviceRequest:
    choices = []
    for choice in request.choices:
        selector = (
            PLUGIN_ONLY if choice.selector is None else f"{PLUGIN_ONLY} && ({choice.selector})"
        )
        choices.append(dataclasses.replace(choice, selector=selector))
    return DeviceRequest(tuple(choices))


class ClaimBook:
    """See the module docstring. Used from the scheduling thread."""

    def __init__(self) -> None:
        #: the caches the watches fill: claims by ``namespace/name``, the others by name
        self.claims: dict[str, Obj] = {}
        self.classes: dict[str, Obj] = {}
        self.slices: dict[str, Obj] = {}
        self.inventory = Inventory()
        self.devices: dict[str, Device] = {}
        #: pod key -> its claims, for pods whose job was submitted
        self.pods: dict[str, PodClaims] = {}
        #: claim key -> the pod whose job allocates it (until it is bound)
        self.allocating: dict[str, str] = {}
        #: claim key -> the pod whose binding allocated it, while its job holds the devices
        self.owners: dict[str, str] = {}
        #: claim key -> (its uid, the pod whose binding allocated it) until the cache shows
        #: the allocation: the watch may bring it after the binding's outcome, and meanwhile
        #: the cached claim looks unallocated to the other pods sharing it
        self.unseen: dict[str, tuple[str, str]] = {}
        #: claim key -> the claim job holding its devices
        self.holders: dict[str, str] = {}

    # -- the inventory -------------------------------------------------------------------

    def refresh(self) -> None:
        """The slices changed: read the devices again."""
        self.inventory = Inventory.of(self.slices.values())
        self.devices = {d.id: d for ds in self.inventory.by_node.values() for d in ds}

    def node_devices(self, node: str) -> tuple[Device, ...]:
        return tuple(self.inventory.by_node.get(node, ()))

    # -- planning a pod ------------------------------------------------------------------

    def request(self, key: str, obj: Mapping[str, Any], base: TaskRequest) -> TaskRequest:
        """The pod's whole request: the device plugin's part (which never takes a DRA
        device), then its claims'. Raises ClaimError when the pod must wait (a claim not
        created yet, one another pod is allocating, one nothing published fits)."""
        refs = claim_refs(obj)
        devices = base.devices
        if self.devices:
            devices = tuple(_plugin_only(r) for r in devices)
        if not refs:
            return dataclasses.replace(base, devices=devices) if self.devices else base
        plans, reserve, node = self._claims(key, refs)
        selector = dict(base.node_selector)
        if node is not None:
            selector[NODE_LABEL] = node
        plugin = sum(r.primary.count for r in base.devices)
        for plan in plans:
            self.allocating[plan.key] = key
        self.pods[key] = PodClaims(tuple(plans), tuple(reserve), plugin)
        extra = tuple(r for plan in plans for r in plan.devices)
        return dataclasses.replace(base, devices=devices + extra, node_selector=selector)

    def _claims(
        self, key: str, refs: list[tuple[str, str | None]]
    ) -> tuple[list[ClaimPlan], list[ClaimWrite], str | None]:
        plans: list[ClaimPlan] = []
        reserve: list[ClaimWrite] = []
        node: str | None = None
        for name, claim_key in refs:
            if claim_key is None:
                raise ClaimError(f"waiting for the ResourceClaim of {name!r} to be created")
            claim = self.claims.get(claim_key)
            if claim is None:
                raise ClaimError(f"waiting for ResourceClaim {claim_key}")
            meta = claim.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                raise ClaimError(f"ResourceClaim {claim_key} is being deleted")
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation is None:
                other = self.allocating.get(claim_key)
                if other is not None and other != key:
                    raise ClaimError(f"waiting for pod {other} to allocate {claim_key}")
                unseen = self.unseen.get(claim_key)
                if unseen is not None and unseen[0] == str(meta.get("uid") or ""):
                    raise ClaimError(f"waiting for the allocation of {claim_key} by {unseen[1]}")
                plans.append(plan_claim(claim, self.classes, self.inventory.by_node))
                continue
            where = allocated_node(allocation)
            if where is None or node not in (None, where):
                raise ClaimError(f"ResourceClaim {claim_key} is allocated where this pod cannot go")
            node = where
            namespace, _, claim_name = claim_key.partition("/")
            reserve.append(ClaimWrite(namespace, claim_name, str(meta.get("uid") or "")))
        return plans, reserve, node

    def group_request(self, keys: Sequence[str], pods: Mapping[str, Obj], job: Job) -> Job:
        """A pod group's job with its pods' whole requests, which must be the same."""
        try:
            requests = [self.request(k, pods[k], job.resources) for k in keys]
            if any(r != requests[0] for r in requests[1:]):
                raise ClaimError(
                    "the pods of a group must ask for the same devices in their claims"
                )
        except ClaimError:
            for key in keys:
                self.forget(key)
            raise
        return dataclasses.replace(job, resources=requests[0])

    def forget(self, key: str) -> None:
        """The pod's job is gone (or it is no longer ours): its plans are void, and
        nobody waits any more to see an allocation it made."""
        claims = self.pods.pop(key, None)
        for plan in claims.plans if claims is not None else ():
            if self.allocating.get(plan.key) == key:
                del self.allocating[plan.key]
        for claim_key in [c for c, (_, pod) in self.unseen.items() if pod == key]:
            del self.unseen[claim_key]

    def claim_changed(self, claim_key: str, claim: Obj | None) -> None:
        """The cache took a claim's new state (None: deleted): an allocation it shows is
        no longer awaited."""
        if claim is None or (claim.get("status") or {}).get("allocation") is not None:
            self.unseen.pop(claim_key, None)

    # -- binding -------------------------------------------------------------------------

    def plugin_part(self, key: str, placement: Placement) -> Placement:
        """The placement's devices that are the device plugin's (its assignment)."""
        claims = self.pods.get(key)
        if claims is None:
            return placement
        return dataclasses.replace(placement, devices=placement.devices[: claims.plugin_devices])

    def writes(self, key: str, placement: Placement) -> tuple[ClaimWrite, ...]:
        """What to write on the pod's claims before its Binding."""
        claims = self.pods.get(key)
        if claims is None:
            return ()
        shares = placement.devices[claims.plugin_devices :]
        pairs = [(self.claims.get(p.key) or {}, p) for p in claims.plans]
        found = allocations(
            pairs, shares, self.devices, self.inventory.origin, self.classes, placement.node
        )
        allocate = [
            ClaimWrite(p.namespace, p.name, p.uid, allocation)
            for p, allocation in zip(claims.plans, found, strict=True)
        ]
        return (*allocate, *claims.reserve)

    def bound(self, key: str) -> None:
        """The pod's binding succeeded: its job holds the devices of the claims it
        allocated."""
        claims = self.pods.get(key)
        for plan in claims.plans if claims is not None else ():
            self.owners[plan.key] = key
            if self.allocating.get(plan.key) == key:
                del self.allocating[plan.key]
            cached = self.claims.get(plan.key) or {}
            if (cached.get("status") or {}).get("allocation") is None:
                self.unseen[plan.key] = (plan.uid, key)

    # -- what a pod that ended gives back ------------------------------------------------

    def releases(self, obj: Mapping[str, Any]) -> list[ClaimWrite]:
        """The claims reserved for the pod (by the cache), to release."""
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        out = []
        for _, claim_key in claim_refs(obj):
            claim = self.claims.get(claim_key or "")
            if claim is None:
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if any(r.get("uid") == uid for r in reserved):
                namespace, _, name = str(claim_key).partition("/")
                out.append(ClaimWrite(namespace, name, str(claim["metadata"].get("uid") or "")))
        return out

    # -- claim jobs ----------------------------------------------------------------------

    def held(self, running: Mapping[str, bool]) -> dict[str, tuple[Job, Placement] | None]:
        """Claim key -> the claim job its devices need now (None: none). ``running`` says
        whether a pod's job still holds what it allocated."""
        wanted: dict[str, tuple[Job, Placement] | None] = {}
        for claim_key, claim in sorted(self.claims.items()):
            allocation = (claim.get("status") or {}).get("allocation")
            owner = self.owners.get(claim_key)
            if allocation is None or (owner is not None and running.get(owner, False)):
                wanted[claim_key] = None
                continue
            node = allocated_node(allocation)
            shares = self._shares(claim)
            if node is None or not shares:
                wanted[claim_key] = None
                continue
            choices = tuple(
                DeviceRequest((DeviceChoice(self.devices[s.device_id].device_class, 1, s.share),))
                for s in shares
            )
            namespace = str(claim["metadata"].get("namespace") or "default")
            job = Job(
                id=f"claim:{claim_key}#{claim['metadata'].get('uid', '')[:8]}",
                resources=TaskRequest(devices=choices),
                name=str(claim["metadata"].get("name")),
                user=namespace,
                queue=namespace,
                preemptible=False,
            )
            wanted[claim_key] = (job, Placement(node, 0, 0, tuple(shares)))
        return wanted

    def _shares(self, claim: Obj) -> list[DeviceShare]:
        """The devices of the claim's allocation that the inventory knows, with the share
        the driver gives each (see :func:`~hetsched.k8s.dra.devices.allocated_devices`)."""
        status = claim.get("status") or {}
        results = (((status.get("allocation") or {}).get("devices") or {}).get("results")) or []
        drivers = sorted({str(r.get("driver")) for r in results if isinstance(r, Mapping)})
        shares: dict[str, DeviceShare] = {}
        for driver in drivers:
            for device in allocated_devices(claim, driver):
                core_id = dra_id(driver, device.pool, device.device)
                if core_id in self.devices:
                    shares.setdefault(core_id, DeviceShare(core_id, device.share))
        return list(shares.values())

    @staticmethod
    def ours(claim: Mapping[str, Any]) -> bool:
        """This scheduler allocated the claim (it carries our finalizer)."""
        return FINALIZER in ((claim.get("metadata") or {}).get("finalizers") or [])
