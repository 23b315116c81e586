"""The API server double's storage: objects, resourceVersions, the watch history, finalizers.

Every change gets the next resourceVersion and is appended to its resource's history, as
the object's JSON text, encoded once: every watch sends that text as it is (and decodes it
only to test a selector), so a change costs one encoding however many watch it. Watches
read the history by position: a watch remembers where it stopped and reads only what was
appended since (``scanned`` counts the entries read, so a test can check that no watch
rescans the history on every change). A resourceVersion older than the kept history
is answered with 410 Gone, as the real server does after a compaction.

An object with ``metadata.finalizers`` is not removed by a delete: it gets a
``deletionTimestamp`` and goes when an update removes its last finalizer, as in Kubernetes.
"""

from __future__ import annotations

import bisect
import copy
import json
import threading
import uuid
from collections import Counter, defaultdict
from typing import Any

from k8s.apikinds import namespaced

Obj = dict[str, Any]
Key = tuple[str, str, str]

#: the timestamp every object gets (tests never depend on the clock)
STAMP = "2026-01-01T00:00:00Z"


class Expired(Exception):
    """A watch asked for history that is no longer kept (410 Gone)."""


class Change:
    """One entry of a resource's history: the object as it was, as JSON text."""

    __slots__ = ("_obj", "kind", "rv", "text")

    def __init__(self, rv: int, kind: str, text: str) -> None:
        self.rv = rv
        self.kind = kind
        self.text = text
        self._obj: Obj | None = None

    @property
    def obj(self) -> Obj:
        """The object, decoded once (for selectors); do not change it."""
        if self._obj is None:
            self._obj = json.loads(self.text)
        return self._obj


def encode(obj: Obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def field_value(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def selected(obj: Obj, selector: str) -> bool:
    """Whether ``obj`` passes a field selector (``a.b=x,c!=y``)."""
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, want = term.split("!=", 1)
            if field_value(obj, key) == want:
                return False
        else:
            key, want = term.split("=", 1)
            if field_value(obj, key.rstrip("=")) != want:
                return False
    return True


def labels_selected(obj: Obj, selector: str) -> bool:
    """Whether ``obj`` passes an equality-based label selector (``a=x,b!=y,c``)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, want = term.split("!=", 1)
            if labels.get(key) == want:
                return False
        elif "=" in term:
            key, want = term.split("=", 1)
            if labels.get(key.rstrip("=")) != want:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class Store:
    """Objects by (resource, namespace, name) and each resource's history of changes."""

    def __init__(self, history: int = 10_000) -> None:
        self.lock = threading.Condition()
        self.rv = 0
        self.objects: dict[Key, Obj] = {}
        #: resource -> its changes, oldest first
        self.logs: dict[str, list[Change]] = defaultdict(list)
        #: resource -> the resourceVersions of its log (for the bisect of a watch's start)
        self._rvs: dict[str, list[int]] = defaultdict(list)
        #: resource -> how many of its changes were dropped from the front of its log
        self.base: dict[str, int] = defaultdict(int)
        #: resource -> the newest dropped resourceVersion: a watch from before it gets 410
        self.floor: dict[str, int] = defaultdict(int)
        self.history = history
        #: every binding POST: (namespace, name, node, HTTP code)
        self.bindings: list[tuple[str, str, str, int]] = []
        #: (namespace, name) -> monotonic time of its successful binding (benchmarks)
        self.bound_at: dict[tuple[str, str], float] = {}
        #: history entries read by watches
        self.scanned = 0
        #: requests served: (verb, resource, subresource) -> count
        self.requests: Counter[tuple[str, str, str]] = Counter()

    # -- history -------------------------------------------------------------------------

    def record(self, resource: str, kind: str, obj: Obj) -> str:
        """A change: the object gets the next resourceVersion; watches wake up. Returns
        the object's JSON text as recorded."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        log = self.logs[resource]
        text = encode(obj)
        log.append(Change(self.rv, kind, text))
        self._rvs[resource].append(self.rv)
        if len(log) > self.history:
            self._drop(resource, len(log) - self.history // 2)
        self.lock.notify_all()
        return text

    def _drop(self, resource: str, count: int) -> None:
        if count <= 0:
            return
        log = self.logs[resource]
        self.floor[resource] = max(self.floor[resource], log[count - 1].rv)
        del log[:count]
        del self._rvs[resource][:count]
        self.base[resource] += count

    def compact(self) -> None:
        """Forget all watch history: every older resourceVersion now gets 410."""
        with self.lock:
            for resource in list(self.logs):
                self._drop(resource, len(self.logs[resource]))
                self.floor[resource] = self.rv
            self.lock.notify_all()

    def position(self, resource: str, since: int) -> int:
        """Where a watch from resourceVersion ``since`` starts reading ``resource``'s
        history (an absolute position); raises Expired when that history is gone."""
        if since < self.floor[resource]:
            raise Expired(f"too old resource version: {since} ({self.floor[resource]})")
        return self.base[resource] + bisect.bisect_right(self._rvs[resource], since)

    def read(self, resource: str, position: int) -> tuple[int, list[Change]]:
        """The changes of ``resource`` from ``position`` on, and the position after them;
        raises Expired when some of them were dropped before the watch read them."""
        start = position - self.base[resource]
        if start < 0:
            raise Expired("the watch fell behind the kept history")
        fresh = self.logs[resource][start:]
        self.scanned += len(fresh)
        return position + len(fresh), fresh

    def end(self, resource: str) -> int:
        return self.base[resource] + len(self.logs[resource])

    # -- objects -------------------------------------------------------------------------

    def put(self, resource: str, obj: Obj) -> Obj:
        """Create or replace; the stored copy is returned."""
        with self.lock:
            meta = obj.setdefault("metadata", {})
            namespace = meta.get("namespace", "") if namespaced(resource) else ""
            key = (resource, namespace, meta["name"])
            old = self.objects.get(key)
            kind = "MODIFIED" if old is not None else "ADDED"
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", STAMP)
            if "spec" in obj:
                generation = int((old or {}).get("metadata", {}).get("generation") or 0)
                if old is None or old.get("spec") != obj.get("spec"):
                    generation += 1
                meta["generation"] = max(generation, 1)
            self.objects[key] = obj
            text = self.record(resource, kind, obj)
            self.settle(key)
            # a copy, decoded from the recorded text (cheaper than a deep copy)
            copied: Obj = json.loads(text)
            return copied

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def delete(self, resource: str, namespace: str, name: str) -> Obj | None:
        """Remove the object, or mark it deleted while finalizers hold it."""
        with self.lock:
            key = (resource, namespace, name)
            obj = self.objects.get(key)
            if obj is None:
                return None
            meta = obj["metadata"]
            if meta.get("finalizers"):
                if not meta.get("deletionTimestamp"):
                    meta["deletionTimestamp"] = STAMP
                    self.record(resource, "MODIFIED", obj)
                return copy.deepcopy(obj)
            del self.objects[key]
            self.record(resource, "DELETED", obj)
            return copy.deepcopy(obj)

    def settle(self, key: Key) -> None:
        """Remove a deleted object whose last finalizer just went."""
        obj = self.objects.get(key)
        if obj is None:
            return
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.objects[key]
            self.record(key[0], "DELETED", obj)

    def items(self, resource: str, namespace: str | None, selector: str = "") -> list[Obj]:
        with self.lock:
            return [
                copy.deepcopy(o)
                for (r, ns, _), o in sorted(self.objects.items())
                if r == resource and namespace in (None, ns) and selected(o, selector)
            ]

    # -- what other components of a cluster do --------------------------------------------

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        """What a kubelet does when a pod's containers start or end."""
        with self.lock:
            obj = self.objects[("pods", namespace, name)]
            obj.setdefault("status", {})["phase"] = phase
            self.record("pods", "MODIFIED", obj)

    def create_pod_claims(self, namespace: str, pod_name: str) -> list[Obj]:
        """What kube-controller-manager's resourceclaim controller does for a new pod: a
        ResourceClaim from each ``spec.resourceClaims[].resourceClaimTemplateName``
        (``generateName: <pod>-<claim>-``, owned by the pod, annotated with
        ``resource.kubernetes.io/pod-claim-name``), named in the pod's
        ``status.resourceClaimStatuses``. Returns the claims created."""
        with self.lock:
            pod = self.objects[("pods", namespace, pod_name)]
            created: list[Obj] = []
            statuses = []
            for ref in pod.get("spec", {}).get("resourceClaims") or []:
                template_name = ref.get("resourceClaimTemplateName")
                if not template_name:
                    continue
                template = self.objects[("resourceclaimtemplates", namespace, template_name)]
                spec = template["spec"]
                meta = copy.deepcopy(spec.get("metadata") or {})
                name = f"{pod_name}-{ref['name']}-{uuid.uuid4().hex[:5]}"
                meta.update(name=name, namespace=namespace)
                meta.setdefault("annotations", {})["resource.kubernetes.io/pod-claim-name"] = ref[
                    "name"
                ]
                meta["ownerReferences"] = [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod_name,
                        "uid": pod["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ]
                claim = {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": meta,
                    "spec": copy.deepcopy(spec["spec"]),
                }
                created.append(self.put("resourceclaims", claim))
                statuses.append({"name": ref["name"], "resourceClaimName": name})
            if statuses:
                pod.setdefault("status", {})["resourceClaimStatuses"] = statuses
                self.record("pods", "MODIFIED", pod)
            return created
