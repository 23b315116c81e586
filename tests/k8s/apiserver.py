"""A TEST DOUBLE of the Kubernetes API server: the endpoints hetsched's Kubernetes parts
use, serving real Kubernetes JSON over real HTTP on 127.0.0.1.

Why a double: no real kube-apiserver can run on the machines these tests run on (no
container engine, no API server package; see docs/kubernetes.md), yet the scheduler, the
extender and the DRA driver must be tested through the official ``kubernetes`` client on the
wire. So this speaks the wire format the client parses, with the semantics that make races
honest, and nothing else:

- core/v1 pods, nodes and events, coordination.k8s.io/v1 leases, and resource.k8s.io/v1
  ResourceSlices, DeviceClasses, ResourceClaims (with the ``status`` subresource) and
  ResourceClaimTemplates (see apikinds.py for what is checked of those);
- list and get with ``metadata.resourceVersion``, field selectors (``spec.schedulerName``,
  ``spec.nodeName``, ``metadata.namespace``, ``status.phase``, ``spec.driver``, ...) and
  equality label selectors; create (409 AlreadyExists), replace (409 Conflict on a stale
  ``metadata.resourceVersion``), merge patch (strategic merge is taken as merge) and JSON
  patch (add, remove, replace, test), delete (an object with finalizers is only marked
  deleted until they are gone);
- ``?watch=true``: newline-delimited ``{"type", "object"}`` WatchEvents in chunks, from a
  resourceVersion (none or ``0``: synthetic ADDED for what exists first), ending at
  ``timeoutSeconds``; each watch reads its resource's history from where it stopped (see
  apistore.py); a resourceVersion older than the kept history gets an ERROR event with a
  410 ``Status``, as the real server does after compaction;
- ``POST pods/{name}/binding``: sets ``spec.nodeName`` and copies the Binding's
  ``metadata.annotations`` onto the pod in the same update (as the real server does), with
  the Binding's ``metadata.uid`` and ``metadata.resourceVersion`` as preconditions; answers
  **201 with a Status** (not a Binding), **409 Conflict** when already bound.

Every answer goes out in one write on a socket with TCP_NODELAY, as kube-apiserver's do
(headers and body in separate writes would wait for the client's delayed ACK).
``connections`` counts the TCP connections accepted and ``writes`` the writes per
non-watch answer, so tests can check connection reuse and single writes.

``write_latency_s`` (0 by default) delays every write (POST, PUT, PATCH, DELETE) by that
long before it is applied, on the request's own thread, as a real API server's etcd commit
does: requests on other connections go on meanwhile.

Not served: authentication, admission, defaulting beyond what is listed, other kinds.
Tests also act on the store directly (``set_phase``, ``compact``, ``create_pod_claims``)
where a kubelet, etcd compaction or kube-controller-manager would act in a real cluster.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from k8s.apikinds import KINDS, PREFIXES, apply_defaults, check, namespaced, status_view
from k8s.apistore import Expired, Obj, Store, labels_selected, selected

__all__ = ["ApiServer", "Store", "gpus", "node_json", "pod_json", "status"]


def status(code: int, reason: str, message: str, causes: list[str] | None = None) -> Obj:
    answer: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if causes:
        answer["details"] = {"causes": [{"message": c} for c in causes]}
    return answer


def _merge(target: Obj, patch: Obj) -> None:
    """JSON merge patch (RFC 7386): null deletes, objects merge, the rest replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class PatchFailed(Exception):
    """A JSON patch whose ``test`` failed or whose path does not exist."""


def _json_patch(target: Obj, operations: list[Obj]) -> None:
    """JSON patch (RFC 6902): add, remove, replace and test."""
    for op in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        parent: Any = target
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.get(part)
            if parent is None:
                raise PatchFailed(f"{op['path']}: no such path")
        last = parts[-1]
        kind = op["op"]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(index, copy.deepcopy(op["value"]))
            elif kind == "remove":
                parent.pop(index)
            elif kind == "replace":
                parent[index] = copy.deepcopy(op["value"])
            elif kind == "test" and parent[index] != op["value"]:
                raise PatchFailed(f"{op['path']}: test failed")
        elif kind in ("add", "replace"):
            if kind == "replace" and last not in parent:
                raise PatchFailed(f"{op['path']}: no such path")
            parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if last not in parent:
                raise PatchFailed(f"{op['path']}: no such path")
            del parent[last]
        elif kind == "test" and parent.get(last) != op["value"]:
            raise PatchFailed(f"{op['path']}: test failed")


class _Headers(dict[str, str]):
    """Request headers by lower-cased name."""

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(key.lower(), default)


class _CountingWriter:
    """The connection's writer, counting writes (an answer must be one write)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.count = 0

    def write(self, data: bytes) -> int:
        self.count += 1
        written: int = self.inner.write(data)
        return written

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    @property
    def closed(self) -> bool:
        return bool(self.inner.closed)


class _Handler(BaseHTTPRequestHandler):
    server: ApiServer
    #: keep-alive, and chunked watch streams as the real server sends them (a client reads
    #: each event as its chunk arrives)
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.wfile = _CountingWriter(self.wfile)  # type: ignore[assignment]
        with self.server.counts_lock:
            self.server.connections += 1

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def parse_request(self) -> bool:
        """The request line and the headers, read without the email package (which costs
        more than the rest of a request here): what this double needs of HTTP/1.1."""
        line = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.requestline = line
        words = line.split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            self.request_version = "HTTP/1.0"
            self.send_error(400, f"Bad request syntax ({line!r})")
            return False
        self.command, self.path, self.request_version = words
        headers = _Headers()
        while True:
            raw = self.rfile.readline(65537)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("iso-8859-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        self.headers = headers  # type: ignore[assignment]
        connection = headers.get("Connection", "").lower()
        self.close_connection = connection == "close" or (
            self.request_version == "HTTP/1.0" and connection != "keep-alive"
        )
        return True

    # -- plumbing ------------------------------------------------------------------------

    def _send(self, code: int, body: Obj) -> None:
        """The whole answer in one write: the status line, the headers and the body."""
        data = json.dumps(body).encode()
        writer: Any = self.wfile
        before = writer.count
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._headers_buffer.append(b"\r\n" + data)
        self.flush_headers()
        with self.server.counts_lock:
            self.server.writes[writer.count - before] += 1

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def _route(self) -> tuple[str, str | None, str | None, str | None, dict[str, str]]:
        """(resource, namespace, name, subresource, query) of the request path; resource
        is empty for a path the double does not serve."""
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        for prefix in PREFIXES:
            if url.path.startswith(prefix + "/"):
                parts = url.path[len(prefix) + 1 :].split("/")
                group_version = PREFIXES[prefix]
                break
        else:
            return "", None, None, None, query
        namespace = None
        if parts[0] == "namespaces" and len(parts) >= 3:
            namespace, parts = parts[1], parts[2:]
        resource = parts[0]
        kind = KINDS.get(resource)
        if kind is None or kind.group_version != group_version:
            return "", None, None, None, query
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else None
        self.server.store.requests[(self.command, resource, sub or "")] += 1
        return resource, namespace, name, sub, query

    def _not_served(self) -> None:
        self._send(404, status(404, "NotFound", f"the server could not find {self.path}"))

    def _invalid(self, resource: str, name: str, errors: list[str]) -> None:
        kind = KINDS[resource].kind
        message = f'{kind} "{name}" is invalid: ' + "; ".join(errors)
        self._send(422, status(422, "Invalid", message, errors))

    # -- verbs ---------------------------------------------------------------------------

    def do_GET(self) -> None:
        resource, namespace, name, _, query = self._route()
        if not resource:
            self._not_served()
            return
        store = self.server.store
        if name is not None:
            obj = store.get(resource, namespace or "", name)
            if obj is None:
                self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
            else:
                self._send(200, obj)
            return
        selector = query.get("fieldSelector", "")
        labels = query.get("labelSelector", "")
        if query.get("watch") in ("true", "1"):
            self._watch(resource, namespace, selector, labels, query)
            return
        with store.lock:
            items = [o for o in store.items(resource, namespace, selector)]
            rv = store.rv
        kind = KINDS[resource]
        self._send(
            200,
            {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.group_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": [o for o in items if labels_selected(o, labels)],
            },
        )

    def _watch(
        self,
        resource: str,
        namespace: str | None,
        selector: str,
        labels: str,
        query: dict[str, str],
    ) -> None:
        store = self.server.store
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 30)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def wanted(obj: Obj) -> bool:
            ns = obj.get("metadata", {}).get("namespace", "")
            return (
                namespace in (None, ns) and selected(obj, selector) and labels_selected(obj, labels)
            )

        lines: list[Obj] = []
        #: the recorded changes, as their text (sent as they are)
        texts: list[str] = []
        everything = namespace is None and not selector and not labels
        position = 0
        with store.lock:
            since = int(query.get("resourceVersion") or "0")
            try:
                if since == 0:
                    lines = [
                        {"type": "ADDED", "object": o}
                        for o in store.items(resource, namespace, selector)
                        if labels_selected(o, labels)
                    ]
                    position = store.end(resource)
                else:
                    position = store.position(resource, since)
            except Expired as exc:
                lines = [{"type": "ERROR", "object": status(410, "Expired", str(exc))}]
                deadline = 0.0
        try:
            while True:
                encoded = [json.dumps(line) for line in lines] + texts
                lines, texts = [], []
                for text in encoded:
                    data = text.encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                if time.monotonic() >= deadline or self.server.stopping:
                    self.wfile.write(b"0\r\n\r\n")
                    return
                with store.lock:
                    if position == store.end(resource):
                        store.lock.wait(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
                    try:
                        position, changes = store.read(resource, position)
                        texts = [
                            f'{{"type":"{c.kind}","object":{c.text}}}'
                            for c in changes
                            if everything or wanted(c.obj)
                        ]
                    except Expired as exc:
                        lines = [{"type": "ERROR", "object": status(410, "Expired", str(exc))}]
                        deadline = 0.0
        except (BrokenPipeError, ConnectionResetError):
            return

    def _write_latency(self) -> None:
        if self.server.write_latency_s > 0:
            time.sleep(self.server.write_latency_s)

    def do_POST(self) -> None:
        self._write_latency()
        resource, namespace, name, sub, _ = self._route()
        body = self._body()
        if not resource or (name is not None and (resource, sub) != ("pods", "binding")):
            self._not_served()
            return
        if resource == "pods" and sub == "binding" and name is not None:
            self._bind(namespace or "default", name, body)
            return
        self._create(resource, namespace, body)

    def _create(self, resource: str, namespace: str | None, body: Obj) -> None:
        store = self.server.store
        kind = KINDS[resource]
        body["apiVersion"], body["kind"] = kind.group_version, kind.kind
        meta = body.setdefault("metadata", {})
        if namespace is not None and kind.namespaced:
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = str(meta.get("name") or "")
        if not name:
            self._invalid(resource, name, ["metadata.name: Required value"])
            return
        if resource == "pods":
            body.setdefault("status", {}).setdefault("phase", "Pending")
            body.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
        if kind.status_subresource:
            body.pop("status", None)  # a create sets no status, as on the real server
        apply_defaults(resource, body)
        with store.lock:
            if store.get(resource, meta.get("namespace", "") if kind.namespaced else "", name):
                self._send(409, status(409, "AlreadyExists", f'{resource} "{name}" already exists'))
                return
            errors = check(resource, body, None, None)
            if errors:
                self._invalid(resource, name, errors)
                return
            created = store.put(resource, body)
        self._send(201, created)

    def _bind(self, namespace: str, name: str, body: Obj) -> None:
        store = self.server.store
        node = str((body.get("target") or {}).get("name") or "")
        meta = body.get("metadata") or {}
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
            elif pod["metadata"].get("deletionTimestamp"):
                code = 409
                answer = status(
                    409, "Conflict", f"pod {name} is being deleted, cannot be assigned to a host"
                )
            elif (uid := meta.get("uid")) and uid != pod["metadata"]["uid"]:
                code, answer = 409, status(409, "Conflict", f"pod {name}: uid precondition failed")
            elif (rv := meta.get("resourceVersion")) and rv != pod["metadata"]["resourceVersion"]:
                code = 409
                answer = status(409, "Conflict", f"pod {name}: resourceVersion precondition failed")
            else:
                pod["spec"]["nodeName"] = node
                annotations = meta.get("annotations") or {}
                if annotations:
                    pod["metadata"].setdefault("annotations", {}).update(annotations)
                conditions = [
                    c
                    for c in pod.setdefault("status", {}).get("conditions") or []
                    if c.get("type") != "PodScheduled"
                ]
                pod["status"]["conditions"] = [
                    *conditions,
                    {"type": "PodScheduled", "status": "True"},
                ]
                store.record("pods", "MODIFIED", pod)
                code, answer = 201, status(201, "", "")
                answer["status"] = "Success"
            store.bindings.append((namespace, name, node, code))
            if code == 201:
                store.bound_at[(namespace, name)] = time.monotonic()
        self._send(code, answer)

    def do_PATCH(self) -> None:
        self._write_latency()
        resource, namespace, name, sub, _ = self._route()
        patch = self._body()
        if not resource or name is None:
            self._not_served()
            return
        content = self.headers.get("Content-Type", "")
        self._update(resource, namespace or "", name, sub, patch=(content, patch))

    def do_PUT(self) -> None:
        self._write_latency()
        resource, namespace, name, sub, _ = self._route()
        body = self._body()
        if not resource or name is None:
            self._not_served()
            return
        self._update(resource, namespace or "", name, sub, replace=body)

    def _update(
        self,
        resource: str,
        namespace: str,
        name: str,
        sub: str | None,
        *,
        patch: tuple[str, Any] | None = None,
        replace: Obj | None = None,
    ) -> None:
        store = self.server.store
        kind = KINDS[resource]
        key = (resource, namespace if kind.namespaced else "", name)
        with store.lock:
            current = store.objects.get(key)
            if current is None:
                self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
                return
            if replace is not None:
                sent = str(replace.get("metadata", {}).get("resourceVersion") or "")
                if sent != current["metadata"]["resourceVersion"]:
                    self._send(
                        409,
                        status(
                            409,
                            "Conflict",
                            f'Operation cannot be fulfilled on {resource} "{name}": the object '
                            "has been modified; please apply your changes to the latest "
                            "version and try again",
                        ),
                    )
                    return
                new = copy.deepcopy(replace)
            else:
                assert patch is not None
                new = copy.deepcopy(current)
                try:
                    if patch[0].startswith("application/json-patch") or isinstance(patch[1], list):
                        _json_patch(new, patch[1])
                    else:
                        _merge(new, patch[1])
                except (PatchFailed, KeyError, IndexError, ValueError, TypeError) as exc:
                    self._send(422, status(422, "Invalid", f"the patch failed: {exc}"))
                    return
            new["apiVersion"], new["kind"] = kind.group_version, kind.kind
            meta = new.setdefault("metadata", {})
            for fixed in ("uid", "creationTimestamp", "name"):
                meta[fixed] = current["metadata"].get(fixed)
            if kind.namespaced:
                meta["namespace"] = namespace
            if current["metadata"].get("deletionTimestamp"):
                meta["deletionTimestamp"] = current["metadata"]["deletionTimestamp"]
            new = status_view(resource, new, current, sub)
            apply_defaults(resource, new)
            errors = check(resource, new, current, sub)
            if errors:
                self._invalid(resource, name, errors)
                return
            if replace is None and "resourceVersion" in new["metadata"]:
                # a patch applies to the latest version unless it names an older one
                sent = (
                    (patch[1] if patch and isinstance(patch[1], dict) else {})
                    .get("metadata", {})
                    .get("resourceVersion")
                )
                if sent and sent != current["metadata"]["resourceVersion"]:
                    self._send(409, status(409, "Conflict", f'{resource} "{name}" was modified'))
                    return
            stored = store.put(resource, new)
            if store.objects.get(key) is None:
                stored = new  # the last finalizer went: the object is gone
        self._send(200, stored)

    def do_DELETE(self) -> None:
        self._write_latency()
        resource, namespace, name, _, _ = self._route()
        self._body()  # DeleteOptions: read it, so the kept-alive connection stays in step
        if not resource or name is None:
            self._not_served()
            return
        space = namespace or "" if namespaced(resource) else ""
        obj = self.server.store.delete(resource, space, name)
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
        #: TCP connections accepted
        self.connections = 0
        #: writes per non-watch answer -> how many answers took that many
        self.writes: Counter[int] = Counter()
        self.counts_lock = threading.Lock()
        #: seconds every write waits before it is applied (see the module doc)
        self.write_latency_s = 0.0
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
