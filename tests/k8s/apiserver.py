"""A TEST DOUBLE of the Kubernetes API server: the few endpoints hetsched's scheduler uses,
serving real Kubernetes JSON over real HTTP on 127.0.0.1.

Why a double: no real kube-apiserver can run on the machines these tests run on (no
container engine, no API server package; see docs/kubernetes.md), yet the scheduler must be
tested through the official ``kubernetes`` client on the wire. So this speaks the wire
format the client parses, with the semantics that make races honest, and nothing else:

- list and get of nodes and pods (all namespaces or one) with ``metadata.resourceVersion``
  and field selectors (``spec.schedulerName``, ``spec.nodeName``, ``metadata.namespace``,
  ``status.phase``); create, merge patch (strategic merge is taken as merge) and delete;
- ``?watch=true``: newline-delimited ``{"type", "object"}`` WatchEvents from a
  resourceVersion (none or ``0``: synthetic ADDED for what exists first), ending at
  ``timeoutSeconds``; a resourceVersion older than the kept history gets an ERROR event
  with a 410 ``Status``, as the real server does after compaction;
- ``POST pods/{name}/binding``: sets ``spec.nodeName`` and answers **201 with a Status**
  (not a Binding, as the real server does), **409 Conflict** when already bound;
- core/v1 events: create and list;
- ``coordination.k8s.io/v1`` leases: get, create (409 AlreadyExists), replace (409 Conflict
  on a stale ``metadata.resourceVersion``).

Not served: authentication, admission, defaulting beyond what the tests need, other kinds.
Tests also act on the store directly (``set_phase``, ``compact``) where a kubelet or etcd
compaction would act in a real cluster.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

Obj = dict[str, Any]

_GROUP_LEASES = "/apis/coordination.k8s.io/v1"


def status(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _selected(obj: Obj, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, want = term.split("!=", 1)
            if _field(obj, key) == want:
                return False
        else:
            key, want = term.split("=", 1)
            if _field(obj, key.rstrip("=")) != want:
                return False
    return True


def _merge(target: Obj, patch: Obj) -> None:
    """JSON merge patch (RFC 7386): null deletes, objects merge, the rest replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class Store:
    """Objects by (resource, namespace, name) and the history of changes watches replay."""

    def __init__(self, history: int = 10_000) -> None:
        self.lock = threading.Condition()
        self.rv = 0
        self.objects: dict[tuple[str, str, str], Obj] = {}
        #: (resourceVersion, resource, type, object)
        self.log: list[tuple[int, str, str, Obj]] = []
        self.history = history
        #: the oldest resourceVersion a watch may resume from
        self.floor = 0
        #: every binding POST: (namespace, name, node, HTTP code)
        self.bindings: list[tuple[str, str, str, int]] = []

    def _record(self, resource: str, kind: str, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.log.append((self.rv, resource, kind, copy.deepcopy(obj)))
        if len(self.log) > self.history:
            self.compact(len(self.log) - self.history)
        self.lock.notify_all()

    def compact(self, drop: int | None = None) -> None:
        """Forget watch history (all of it by default): older resourceVersions get 410."""
        with self.lock:
            drop = len(self.log) if drop is None else drop
            self.log = self.log[drop:]
            self.floor = self.rv

    def put(self, resource: str, obj: Obj) -> Obj:
        with self.lock:
            meta = obj.setdefault("metadata", {})
            namespace = meta.get("namespace", "") if resource != "nodes" else ""
            key = (resource, namespace, meta["name"])
            kind = "MODIFIED" if key in self.objects else "ADDED"
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
            self.objects[key] = obj
            self._record(resource, kind, obj)
            return copy.deepcopy(obj)

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def delete(self, resource: str, namespace: str, name: str) -> Obj | None:
        with self.lock:
            obj = self.objects.pop((resource, namespace, name), None)
            if obj is not None:
                self._record(resource, "DELETED", obj)
            return copy.deepcopy(obj) if obj is not None else None

    def items(self, resource: str, namespace: str | None, selector: str) -> list[Obj]:
        with self.lock:
            return [
                copy.deepcopy(o)
                for (r, ns, _), o in sorted(self.objects.items())
                if r == resource and namespace in (None, ns) and _selected(o, selector)
            ]

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        """What a kubelet does when a pod's containers start or end."""
        with self.lock:
            obj = self.objects[("pods", namespace, name)]
            obj.setdefault("status", {})["phase"] = phase
            self._record("pods", "MODIFIED", obj)

    def events(
        self, resource: str, namespace: str | None, selector: str, since: int
    ) -> Iterator[tuple[str, Obj]]:
        for rv, res, kind, obj in self.log:
            meta = obj["metadata"]
            mine = res == resource and namespace in (None, meta.get("namespace", ""))
            if rv > since and mine and _selected(obj, selector):
                yield kind, obj


class _Handler(BaseHTTPRequestHandler):
    server: ApiServer
    #: keep-alive, and chunked watch streams as the real server sends them (a client reads
    #: each event as its chunk arrives)
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing ------------------------------------------------------------------------

    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Obj:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def _route(self) -> tuple[str, str | None, str | None, str | None, dict[str, str]]:
        """(resource, namespace, name, subresource, query) of the request path."""
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path = url.path
        for prefix in ("/api/v1", _GROUP_LEASES):
            if path.startswith(prefix + "/"):
                path = path[len(prefix) + 1 :]
                break
        else:
            return "", None, None, None, query
        parts = path.split("/")
        namespace = None
        if parts[0] == "namespaces" and len(parts) >= 3:
            namespace, parts = parts[1], parts[2:]
        resource = parts[0]
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else None
        return resource, namespace, name, sub, query

    # -- verbs ---------------------------------------------------------------------------

    def do_GET(self) -> None:
        resource, namespace, name, _, query = self._route()
        store = self.server.store
        if name is not None:
            obj = store.get(resource, namespace or "", name)
            if obj is None:
                self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
            else:
                self._send(200, obj)
            return
        selector = query.get("fieldSelector", "")
        if query.get("watch") in ("true", "1"):
            self._watch(resource, namespace, selector, query)
            return
        with store.lock:
            items = store.items(resource, namespace, selector)
            rv = store.rv
        kind = {"pods": "PodList", "nodes": "NodeList", "events": "EventList"}.get(
            resource, "LeaseList"
        )
        api = "coordination.k8s.io/v1" if resource == "leases" else "v1"
        self._send(
            200,
            {
                "kind": kind,
                "apiVersion": api,
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            },
        )

    def _watch(
        self, resource: str, namespace: str | None, selector: str, query: dict[str, str]
    ) -> None:
        store = self.server.store
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
        since_raw = query.get("resourceVersion") or "0"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        lines: list[Obj] = []
        with store.lock:
            since = int(since_raw)
            if since == 0:
                lines = [
                    {"type": "ADDED", "object": o}
                    for o in store.items(resource, namespace, selector)
                ]
                since = store.rv
            elif since < store.floor:
                lines = [
                    {
                        "type": "ERROR",
                        "object": status(
                            410, "Expired", f"too old resource version: {since} ({store.floor})"
                        ),
                    }
                ]
                deadline = 0.0
        try:
            while True:
                for line in lines:
                    data = json.dumps(line).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if time.monotonic() >= deadline or self.server.stopping:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    return
                with store.lock:
                    store.lock.wait(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
                    lines = [
                        {"type": kind, "object": obj}
                        for kind, obj in store.events(resource, namespace, selector, since)
                    ]
                    since = store.rv
        except (BrokenPipeError, ConnectionResetError):
            return

    def do_POST(self) -> None:
        resource, namespace, name, sub, _ = self._route()
        store = self.server.store
        body = self._body()
        if resource == "pods" and sub == "binding" and name is not None:
            self._bind(namespace or "default", name, body)
            return
        meta = body.setdefault("metadata", {})
        if namespace is not None:
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        with store.lock:
            if store.get(resource, namespace or "", meta.get("name", "")) is not None:
                self._send(
                    409, status(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists')
                )
                return
            if resource == "pods":
                body.setdefault("status", {}).setdefault("phase", "Pending")
                body.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
            created = store.put(resource, body)
        self._send(201, created)

    def _bind(self, namespace: str, name: str, body: Obj) -> None:
        store = self.server.store
        node = str((body.get("target") or {}).get("name") or "")
        with store.lock:
            pod = store.objects.get(("pods", namespace, name))
            if pod is None:
                code, answer = 404, status(404, "NotFound", f'pods "{name}" not found')
            elif pod.get("spec", {}).get("nodeName"):
                code = 409
                answer = status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                    f'already assigned to node "{pod["spec"]["nodeName"]}"',
                )
            elif (uid := body.get("metadata", {}).get("uid")) and uid != pod["metadata"]["uid"]:
                code, answer = 409, status(409, "Conflict", f"pod {name}: uid precondition failed")
            else:
                pod["spec"]["nodeName"] = node
                store._record("pods", "MODIFIED", pod)
                code, answer = 201, status(201, "", "")
                answer["status"] = "Success"
            store.bindings.append((namespace, name, node, code))
        self._send(code, answer)

    def do_PATCH(self) -> None:
        resource, namespace, name, _, _ = self._route()
        store = self.server.store
        patch = self._body()
        with store.lock:
            obj = store.objects.get((resource, namespace or "", name or ""))
            if obj is None:
                self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
                return
            _merge(obj, patch)
            store._record(resource, "MODIFIED", obj)
            answer = copy.deepcopy(obj)
        self._send(200, answer)

    def do_PUT(self) -> None:
        resource, namespace, name, _, _ = self._route()
        store = self.server.store
        body = self._body()
        with store.lock:
            current = store.objects.get((resource, namespace or "", name or ""))
            if current is None:
                self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
                return
            sent = str(body.get("metadata", {}).get("resourceVersion") or "")
            if sent != current["metadata"]["resourceVersion"]:
                self._send(
                    409,
                    status(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on {resource} "{name}": the object '
                        "has been modified; please apply your changes to the latest version "
                        "and try again",
                    ),
                )
                return
            body["metadata"]["uid"] = current["metadata"]["uid"]
            body["metadata"]["namespace"] = namespace or ""
            replaced = store.put(resource, body)
        self._send(200, replaced)

    def do_DELETE(self) -> None:
        resource, namespace, name, _, _ = self._route()
        self._body()  # DeleteOptions: read it, so the kept-alive connection stays in step
        obj = self.server.store.delete(resource, namespace or "", name or "")
        if obj is None:
            self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
        else:
            self._send(200, obj)


class ApiServer(ThreadingHTTPServer):
    """The double, serving on ``url`` from a daemon thread until :meth:`stop`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.store = Store()
        self.stopping = False
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> ApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        with self.store.lock:
            self.store.lock.notify_all()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


# -- builders of the JSON the tests put in the double ---------------------------------------


def node_json(
    name: str,
    cpu: str = "16",
    memory: str = "64Gi",
    devices: list[Obj] | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    """A Ready node; ``devices`` go in the ``hetsched.io/devices`` annotation."""
    annotations = {"hetsched.io/devices": json.dumps(devices)} if devices else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory},
            "capacity": {"cpu": cpu, "memory": memory},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def gpus(node: str, count: int, model: str = "A100") -> list[Obj]:
    return [
        {
            "id": f"{node}-gpu{i}",
            "class": "gpu",
            "vendor": "nvidia",
            "model": model,
            "attributes": {"memory_gib": 80},
            "health": "healthy",
        }
        for i in range(count)
    ]


def pod_json(
    name: str,
    namespace: str = "default",
    cpu: str = "1",
    memory: str = "1Gi",
    devices: dict[str, int] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    scheduler: str = "hetsched",
    priority: int | None = None,
) -> Obj:
    limits: dict[str, Any] = {f"hetsched.io/{k}": str(v) for k, v in (devices or {}).items()}
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
    }
