"""The scheduler's view of the API server: a small Protocol, and one implementation on the
official ``kubernetes`` client.

Objects cross this boundary as plain Kubernetes JSON (dicts), as the server sent them, so
:mod:`hetsched.k8s.translate` reads the same shapes from a watch, a list or the extender.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from hetsched.k8s.ratelimit import TokenBucket

__all__ = [
    "ApiError",
    "ClusterAPI",
    "KubeClusterAPI",
    "WatchEvent",
    "WatchExpired",
    "for_host",
    "load_api",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class ApiError(RuntimeError):
    """An API call that failed; ``status`` is the HTTP code (0 for a transport error)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class WatchExpired(ApiError):
    """The watch's resourceVersion is too old (410 Gone): relist."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str
    object: Obj


class ClusterAPI(Protocol):
    """What the scheduler asks of the API server. Conflicts are answers, not errors: a
    method returns False/None on 409 and raises ApiError on anything else unexpected."""

    def list_nodes(self) -> tuple[list[Obj], str]:
        """All nodes and the list's resourceVersion."""
        ...

    def list_pods(self) -> tuple[list[Obj], str]:
        """All pods of every namespace (bound ones count against capacity whatever their
        scheduler) and the list's resourceVersion."""
        ...

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        """The pod as the server has it now; None when there is none."""
        ...

    def watch(self, resource: str, resource_version: str, timeout_s: int) -> Iterator[WatchEvent]:
        """Changes to ``nodes`` or ``pods`` after ``resource_version``, until ``timeout_s``;
        raises WatchExpired when the version is too old."""
        ...

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> bool:
        """POST the pod's Binding; False when the pod is already bound (409). ``uid`` (when
        set) is a precondition: a pod recreated under the same name is not bound. The
        ``annotations`` are written on the pod by the same update that binds it (the API
        server copies a Binding's annotations onto the pod), so a binding that fails leaves
        none of them behind."""
        ...

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> None: ...

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None:
        """Patch the ``pods/status`` subresource (the PodScheduled condition)."""
        ...

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        """Delete with a grace period; a pod that is already gone is not an error."""
        ...

    def create_event(self, namespace: str, event: Obj) -> None: ...

    def get_lease(self, namespace: str, name: str) -> Obj | None: ...

    def create_lease(self, namespace: str, lease: Obj) -> Obj | None:
        """The created lease, or None when one of that name exists (409)."""
        ...

    def replace_lease(self, namespace: str, name: str, lease: Obj) -> Obj | None:
        """The replaced lease, or None when ``metadata.resourceVersion`` is stale (409)."""
        ...


def _k8s(module: str) -> Any:
    """A module of the official client, untyped on purpose: its models are partially typed
    and the raw JSON read here never goes through them."""
    return importlib.import_module(f"kubernetes.{module}")


def _api_exception() -> type[Exception]:
    exc: type[Exception] = _k8s("client.rest").ApiException
    return exc


def _code(exc: Exception) -> int:
    return int(getattr(exc, "status", 0) or 0)


#: connections kept alive to the API server (the official client's default is 5 per CPU):
#: enough for the watches and the binding workers, so none opens a connection per request
POOL_SIZE = 32


def load_api(
    kubeconfig: str | None = None, pool_size: int = POOL_SIZE, limit: TokenBucket | None = None
) -> KubeClusterAPI:
    """A client from ``kubeconfig``, else in-cluster config, else the default kubeconfig,
    keeping up to ``pool_size`` connections alive; ``limit`` rate-limits its requests."""
    client, config = _k8s("client"), _k8s("config")
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = max(pool_size, 1)
    return KubeClusterAPI(client.ApiClient(configuration), limit)


def for_host(host: str, pool_size: int = POOL_SIZE) -> KubeClusterAPI:
    """A client for an API server at ``host`` without authentication (tests, proxies)."""
    client = _k8s("client")
    configuration = client.Configuration()
    configuration.host = host
    configuration.connection_pool_maxsize = max(pool_size, 1)
    return KubeClusterAPI(client.ApiClient(configuration))


def _message(data: bytes) -> str:
    """The message of a Status answer (empty when it is not one)."""
    try:
        answer = json.loads(data)
    except ValueError:
        return ""
    return (
        str(answer.get("message") or answer.get("reason") or "") if isinstance(answer, dict) else ""
    )


def _base_path(host: str) -> str | None:
    """The path of the server's URL before the API's own (``/prefix`` for a server at
    ``https://host/prefix``); None for one the connection pool could not be given as is
    (a query, a fragment, characters urllib3 would quote or a trailing slash)."""
    parts = urlsplit(host)
    if parts.query or parts.fragment or not re.fullmatch(r"(/[A-Za-z0-9_.~-]+)*", parts.path):
        return None
    if any(segment in (".", "..") for segment in parts.path.split("/")):
        return None
    return parts.path


def _lines(response: Any) -> Iterator[bytes]:
    """The non-empty lines of a streamed answer, as they arrive (each chunk split once)."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        *complete, pending = (pending + chunk).split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if pending.strip():
        yield pending


class KubeClusterAPI:
    """ClusterAPI on the official client. Responses are read raw (``_preload_content=False``)
    so objects stay the server's JSON; for the Binding POST that is also the workaround for
    the client's binding-response bug (kubernetes-client/python #547, #825): the server
    answers with a Status, which the client fails to read as a Binding after the bind
    succeeded."""

    def __init__(self, api_client: Any, limit: TokenBucket | None = None) -> None:
        client = _k8s("client")
        self.api_client = api_client
        #: every request (not the watches' streams) takes a token of it; None: no limit
        self.limit = limit
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        #: what ``watch`` and ``list_objects`` read, by resource
        self._listers: dict[str, Any] = {
            "nodes": self.core.list_node,
            "pods": self.core.list_pod_for_all_namespaces,
            "resourceclaims": self.resource.list_resource_claim_for_all_namespaces,
            "resourceslices": self.resource.list_resource_slice,
            "deviceclasses": self.resource.list_device_class,
        }

    def close(self) -> None:
        """Close the client's kept-alive connections now, rather than whenever the garbage
        collector gets to them (a client that outlives its API server holds sockets)."""
        self.api_client.close()

    # -- reading -------------------------------------------------------------------------

    @staticmethod
    def _json(response: Any) -> Obj:
        data: Obj = json.loads(response.data or b"{}")
        return data

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Obj:
        api_exception = _api_exception()
        if self.limit is not None:
            self.limit.take()
        try:
            return self._json(fn(*args, _preload_content=False, **kwargs))
        except api_exception as exc:
            raise ApiError(_code(exc), str(getattr(exc, "reason", exc))) from None

    def _list(self, fn: Any) -> tuple[list[Obj], str]:
        data = self._call(fn)
        return list(data.get("items") or []), str(data["metadata"].get("resourceVersion") or "")

    def list_nodes(self) -> tuple[list[Obj], str]:
        return self._list(self.core.list_node)

    def list_pods(self) -> tuple[list[Obj], str]:
        return self._list(self.core.list_pod_for_all_namespaces)

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._call(self.core.read_namespaced_pod, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list_objects(self, resource: str, field_selector: str = "") -> tuple[list[Obj], str]:
        """All objects of ``resource`` (``nodes``, ``pods``, ``resourceclaims``,
        ``resourceslices``, ``deviceclasses``) and the list's resourceVersion."""
        kwargs = {"field_selector": field_selector} if field_selector else {}
        data = self._call(self._listers[resource], **kwargs)
        return list(data.get("items") or []), str(data["metadata"].get("resourceVersion") or "")

    def watch(self, resource: str, resource_version: str, timeout_s: int) -> Iterator[WatchEvent]:
        """Changes to any resource :meth:`list_objects` reads.

        The stream is read raw, one JSON line per event: the official client's ``Watch``
        turns every object into a model first (and this code only wants the JSON), which
        costs more than everything else the scheduler does with a pod."""
        api_exception = _api_exception()
        fn = self._listers[resource]
        try:
            response = fn(
                watch=True,
                resource_version=resource_version,
                timeout_seconds=timeout_s,
                _preload_content=False,
            )
        except api_exception as exc:
            if _code(exc) == 410:
                raise WatchExpired(410, str(getattr(exc, "reason", exc))) from None
            raise ApiError(_code(exc), str(getattr(exc, "reason", exc))) from None
        try:
            for line in _lines(response):
                event = json.loads(line)
                raw = event.get("object") or {}
                if event.get("type") == "ERROR":
                    code = int(raw.get("code") or 0)
                    if code == 410:
                        raise WatchExpired(410, str(raw.get("message", "")))
                    raise ApiError(code, str(raw.get("message", "")))
                yield WatchEvent(str(event.get("type")), raw)
        finally:
            # a stream left unread would poison the connection for its next user
            response.close()
            response.release_conn()

    # -- writing -------------------------------------------------------------------------

    def _post(self, path: str, body: Obj) -> tuple[int, bytes]:
        """POST ``body`` as JSON to ``path``: the status and the whole answer.

        The hot writes (a Binding and an Event per pod) go this way: straight to the
        client's connection pool, with the client's authentication (its token refresh
        included) and TLS settings, but without the generated method's argument validation
        and body sanitizing, which cost more than the request itself. The answer is read to
        its end and the connection handed back to the pool: an unread answer keeps its
        connection, and the next call opens a new one (a TLS handshake per pod against a
        real cluster)."""
        if self.limit is not None:
            self.limit.take()
        api_client = self.api_client
        headers = dict(api_client.default_headers)
        headers["Content-Type"] = headers["Accept"] = "application/json"
        api_client.update_params_for_auth(headers, [], ["BearerToken"], path, "POST", body)
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            response = self._post_raw(path, data, headers)
        except Exception as exc:  # urllib3's transport errors
            raise ApiError(0, f"POST {path}: {exc}") from None
        try:
            return int(response.status), bytes(response.data or b"")
        finally:
            response.release_conn()

    @functools.cached_property
    def _direct(self) -> tuple[Any, str] | None:
        """The API server's connection pool and the path before the API's, looked up once
        (the pool manager would parse the URL and look its pool up again for every
        request); None through a proxy (the pool manager rewrites the URL for it) or for a
        server URL the pool could not be given as is."""
        api_client = self.api_client
        manager = api_client.rest_client.pool_manager
        base = _base_path(api_client.configuration.host)
        if base is None or type(manager).__name__ == "ProxyManager":
            return None
        return manager.connection_from_url(api_client.configuration.host), base

    def _post_raw(self, path: str, data: bytes, headers: dict[str, str]) -> Any:
        """The POST itself: on the server's own pool where there is one, else through the
        pool manager's ``request``."""
        if self._direct is None:
            url = self.api_client.configuration.host + path
            manager = self.api_client.rest_client.pool_manager
            return manager.request("POST", url, body=data, headers=headers, preload_content=False)
        pool, base = self._direct
        return pool.urlopen(
            "POST",
            base + path,
            body=data,
            headers=headers,
            preload_content=False,
            redirect=False,
            assert_same_host=False,
        )

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> bool:
        meta: Obj = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # the answer is a Status, which the generated method would fail to read as a
        # Binding (the client bug above); the raw POST reads it as what it is
        status, data = self._post(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body)
        if status == 409:
            return False
        if status not in (200, 201):
            raise ApiError(status, _message(data) or "unexpected answer to the binding POST")
        return True

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> None:
        self._call(self.core.patch_namespaced_pod, name, namespace, patch)

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None:
        self._call(self.core.patch_namespaced_pod_status, name, namespace, patch)

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        try:
            self._call(
                self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=grace_s
            )
        except ApiError as exc:
            if exc.status != 404:
                raise

    def create_event(self, namespace: str, event: Obj) -> None:
        status, data = self._post(f"/api/v1/namespaces/{namespace}/events", event)
        if status not in (200, 201):
            raise ApiError(status, _message(data) or "the event was not created")

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._call(self.coordination.read_namespaced_lease, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create_lease(self, namespace: str, lease: Obj) -> Obj | None:
        try:
            return self._call(self.coordination.create_namespaced_lease, namespace, lease)
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise

    def replace_lease(self, namespace: str, name: str, lease: Obj) -> Obj | None:
        try:
            return self._call(self.coordination.replace_namespaced_lease, name, namespace, lease)
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise

    # -- nodes and resource.k8s.io/v1 --------------------------------------------------------

    def _get(self, fn: Any, *args: Any) -> Obj | None:
        try:
            return self._call(fn, *args)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _replace(self, fn: Any, *args: Any) -> Obj | None:
        try:
            return self._call(fn, *args)
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise

    def get_node(self, name: str) -> Obj | None:
        return self._get(self.core.read_node, name)

    def get_resource_claim(self, namespace: str, name: str) -> Obj | None:
        return self._get(self.resource.read_namespaced_resource_claim, name, namespace)

    def replace_resource_claim(self, namespace: str, name: str, claim: Obj) -> Obj | None:
        """Update the claim (metadata, e.g. finalizers; its spec is immutable); None when
        ``metadata.resourceVersion`` is stale (409)."""
        return self._replace(
            self.resource.replace_namespaced_resource_claim, name, namespace, claim
        )

    def replace_resource_claim_status(self, namespace: str, name: str, claim: Obj) -> Obj | None:
        """Update the claim's ``status`` (allocation, reservedFor) through the status
        subresource; None when ``metadata.resourceVersion`` is stale (409)."""
        return self._replace(
            self.resource.replace_namespaced_resource_claim_status, name, namespace, claim
        )

    def list_resource_slices(self, field_selector: str = "") -> list[Obj]:
        return self.list_objects("resourceslices", field_selector)[0]

    def create_resource_slice(self, body: Obj) -> Obj:
        return self._call(self.resource.create_resource_slice, body)

    def replace_resource_slice(self, name: str, body: Obj) -> Obj | None:
        """None when ``metadata.resourceVersion`` is stale (409)."""
        return self._replace(self.resource.replace_resource_slice, name, body)

    def delete_resource_slice(self, name: str) -> None:
        """A slice that is already gone is not an error."""
        try:
            self._call(self.resource.delete_resource_slice, name)
        except ApiError as exc:
            if exc.status != 404:
                raise
