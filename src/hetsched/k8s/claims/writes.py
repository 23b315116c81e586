"""What the hetsched scheduler writes on ResourceClaims: allocate and reserve before a pod's
Binding, give back when the pod is gone.

Before binding a pod (kube-scheduler's PreBind of its DynamicResources plugin does the same),
for each claim of the pod:

- a claim the scheduler allocates: its finalizer :data:`FINALIZER` first (an update of the
  claim, so the claim cannot go away while allocated), then ``status.allocation`` and the pod
  in ``status.reservedFor``, in one update of the status; both carry the claim's
  ``resourceVersion``, so a claim someone else allocated or changed meanwhile is a conflict,
  never overwritten;
- a claim allocated already (a shared claim): the pod is added to ``status.reservedFor``
  (a conflict is read again and retried: other pods of the claim reserve it too).

If a later write or the Binding fails, what was written for the pod is undone
(:func:`release`). When a pod is gone or has ended, its entry leaves ``reservedFor``; a claim
this scheduler allocated that nobody reserves any more gets its allocation cleared and its
finalizer removed.

These calls run on the binding workers (allocate, undo) and on the scheduling thread
(release of ended pods); each reads the claim from the API server first.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hetsched.k8s.api import ApiError

__all__ = ["FINALIZER", "ClaimAPI", "ClaimWrite", "ClaimWriteError", "release", "reserve"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: the finalizer of claims the hetsched scheduler allocated (Kubernetes reserves
#: ``resource.kubernetes.io/delete-protection`` for its own allocator)
FINALIZER = "hetsched.io/resourceclaim-allocation"
#: tries of a reservedFor update that conflicts (other pods of a shared claim)
_TRIES = 5


class ClaimAPI(Protocol):
    def get_resource_claim(self, namespace: str, name: str) -> Obj | None: ...

    def replace_resource_claim(self, namespace: str, name: str, claim: Obj) -> Obj | None: ...

    def replace_resource_claim_status(
        self, namespace: str, name: str, claim: Obj
    ) -> Obj | None: ...


class ClaimWriteError(RuntimeError):
    """A claim could not be allocated or reserved for the pod; ``conflict`` when someone
    else changed it first."""

    def __init__(self, message: str, conflict: bool = False) -> None:
        super().__init__(message)
        self.conflict = conflict


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """One claim of a pod to write before its Binding: ``allocation`` to set (None: the
    claim is allocated already and is only reserved)."""

    namespace: str
    name: str
    uid: str
    allocation: Mapping[str, Any] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _ref(pod: Mapping[str, Any]) -> Obj:
    meta = pod.get("metadata") or {}
    return {"resource": "pods", "name": str(meta.get("name")), "uid": str(meta.get("uid"))}


def _read(api: ClaimAPI, write: ClaimWrite) -> Obj:
    claim = api.get_resource_claim(write.namespace, write.name)
    if claim is None:
        raise ClaimWriteError(f"ResourceClaim {write.key} is gone")
    meta = claim.get("metadata") or {}
    if write.uid and meta.get("uid") != write.uid:
        raise ClaimWriteError(f"ResourceClaim {write.key} was recreated", conflict=True)
    if meta.get("deletionTimestamp"):
        raise ClaimWriteError(f"ResourceClaim {write.key} is being deleted")
    return claim


def _allocate(api: ClaimAPI, write: ClaimWrite, pod: Mapping[str, Any]) -> None:
    claim = _read(api, write)
    if (claim.get("status") or {}).get("allocation") is not None:
        raise ClaimWriteError(f"ResourceClaim {write.key} was allocated by someone else", True)
    finalizers = list(claim["metadata"].get("finalizers") or [])
    if FINALIZER not in finalizers:
        claim["metadata"]["finalizers"] = [*finalizers, FINALIZER]
        updated = api.replace_resource_claim(write.namespace, write.name, claim)
        if updated is None:
            raise ClaimWriteError(f"ResourceClaim {write.key} changed meanwhile", True)
        claim = updated
    claim["status"] = {
        **(claim.get("status") or {}),
        "allocation": copy.deepcopy(dict(write.allocation or {})),
        "reservedFor": [_ref(pod)],
    }
    if api.replace_resource_claim_status(write.namespace, write.name, claim) is None:
        _drop_finalizer(api, write)
        raise ClaimWriteError(f"ResourceClaim {write.key} changed meanwhile", True)


def _reserve_allocated(api: ClaimAPI, write: ClaimWrite, pod: Mapping[str, Any]) -> None:
    ref = _ref(pod)
    for _ in range(_TRIES):
        claim = _read(api, write)
        status = claim.get("status") or {}
        if status.get("allocation") is None:
            raise ClaimWriteError(f"ResourceClaim {write.key} is no longer allocated", True)
        reserved = list(status.get("reservedFor") or [])
        if any(r.get("uid") == ref["uid"] for r in reserved):
            return
        claim["status"] = {**status, "reservedFor": [*reserved, ref]}
        if api.replace_resource_claim_status(write.namespace, write.name, claim) is not None:
            return
    raise ClaimWriteError(f"ResourceClaim {write.key}: reservedFor kept changing", True)


def reserve(api: ClaimAPI, writes: Sequence[ClaimWrite], pod: Mapping[str, Any]) -> None:
    """Allocate and reserve the pod's claims, all or none: on a failure what was written
    is undone and ClaimWriteError (or ApiError) raised."""
    done: list[ClaimWrite] = []
    try:
        for write in writes:
            if write.allocation is not None:
                _allocate(api, write, pod)
            else:
                _reserve_allocated(api, write, pod)
            done.append(write)
    except (ClaimWriteError, ApiError):
        release(api, done, pod)
        raise


def _drop_finalizer(api: ClaimAPI, write: ClaimWrite) -> None:
    for _ in range(_TRIES):
        claim = api.get_resource_claim(write.namespace, write.name)
        if claim is None:
            return
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        claim["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
        if api.replace_resource_claim(write.namespace, write.name, claim) is not None:
            return


def release(api: ClaimAPI, writes: Sequence[ClaimWrite], pod: Mapping[str, Any]) -> None:
    """The pod leaves ``reservedFor`` of each claim; a claim this scheduler allocated that
    nobody reserves any more is deallocated and loses the finalizer. Errors are logged:
    the next release (or a restart's) finishes the job."""
    uid = _ref(pod)["uid"]
    for write in writes:
        try:
            _release_one(api, write, uid)
        except ApiError as exc:
            log.warning("cannot release ResourceClaim %s: %s", write.key, exc)


def _release_one(api: ClaimAPI, write: ClaimWrite, uid: str) -> None:
    for _ in range(_TRIES):
        claim = api.get_resource_claim(write.namespace, write.name)
        if claim is None:
            return
        status = dict(claim.get("status") or {})
        reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
        ours = FINALIZER in (claim["metadata"].get("finalizers") or [])
        if reserved == list(status.get("reservedFor") or []) and (reserved or not ours):
            return  # not reserved for the pod, and not ours to deallocate
        status["reservedFor"] = reserved
        if not reserved and ours:
            status.pop("allocation", None)
        if not status["reservedFor"]:
            status.pop("reservedFor")
        claim["status"] = status
        if api.replace_resource_claim_status(write.namespace, write.name, claim) is None:
            continue  # changed meanwhile: read it again
        if not reserved and ours:
            _drop_finalizer(api, write)
        return
    log.warning("ResourceClaim %s kept changing; left for the next release", write.key)
