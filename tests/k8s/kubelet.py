"""A kubelet for tests: the device manager's side of the device plugin API, over real gRPC
on real unix sockets, and an in-memory Kubernetes API for the plugin's pods and Node.

:class:`KubeletDouble` serves ``Registration`` on ``<dir>/kubelet.sock``. On ``Register`` it
does what the kubelet does: check the version and the resource name, dial the plugin's
socket back, ask ``GetDevicePluginOptions``, and start ``ListAndWatch`` in the background,
keeping every list the plugin sends. :meth:`KubeletDouble.restart` is a kubelet restart: it
deletes every socket in the directory (and only sockets) and serves a new ``kubelet.sock``.

With ``pod_resources=True`` it also serves the pod-resources API (``v1.PodResourcesLister``)
on ``<dir>/pod-resources.sock``, as the kubelet does on its own socket: a pod is listed
from the moment :meth:`KubeletDouble.admit` starts admitting it, and a container's devices
once their Allocate returned, which is what the real kubelet's list shows.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import grpc

from hetsched.k8s.deviceplugin import (
    api_pb2,
    api_pb2_grpc,
    podresources_pb2,
    podresources_pb2_grpc,
)
from hetsched.k8s.deviceplugin.publisher import PodView

WAIT_S = 10.0


@dataclass(frozen=True)
class Listed:
    """One device of one ListAndWatch answer."""

    id: str
    health: str
    numa: tuple[int, ...]


@dataclass
class PluginConnection:
    """The kubelet's connection to one registered plugin endpoint."""

    resource: str
    endpoint: str
    channel: grpc.Channel
    stub: api_pb2_grpc.DevicePluginStub
    options: api_pb2.DevicePluginOptions
    #: every ListAndWatch answer, in order
    lists: list[list[Listed]] = field(default_factory=list)
    stream_ended: bool = False

    @property
    def latest(self) -> list[Listed]:
        return self.lists[-1] if self.lists else []


class _Registration(api_pb2_grpc.RegistrationServicer):
    def __init__(self, kubelet: KubeletDouble) -> None:
        self.kubelet = kubelet

    def Register(
        self, request: api_pb2.RegisterRequest, context: grpc.ServicerContext
    ) -> api_pb2.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported {request.version}")
        domain, slash, _ = request.resource_name.partition("/")
        if not slash or "." not in domain or domain.endswith("kubernetes.io"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not an extended resource name")
        self.kubelet._connect(request)
        return api_pb2.Empty()


class _PodResources(podresources_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: KubeletDouble) -> None:
        self.kubelet = kubelet

    def List(
        self, request: podresources_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> podresources_pb2.ListPodResourcesResponse:
        answer = podresources_pb2.ListPodResourcesResponse()
        with self.kubelet._cond:
            for (namespace, name), containers in sorted(self.kubelet.admitted.items()):
                pod = podresources_pb2.PodResources(name=name, namespace=namespace)
                for container, resources in sorted(containers.items()):
                    entry = podresources_pb2.ContainerResources(name=container)
                    for resource, ids in sorted(resources.items()):
                        entry.devices.append(
                            podresources_pb2.ContainerDevices(
                                resource_name=resource, device_ids=ids
                            )
                        )
                    pod.containers.append(entry)
                answer.pod_resources.append(pod)
        return answer


class KubeletDouble:
    def __init__(self, plugin_dir: Path, pod_resources: bool = False) -> None:
        self.dir = plugin_dir
        self.registrations: list[api_pb2.RegisterRequest] = []
        self.plugins: dict[str, PluginConnection] = {}
        self.pod_resources = pod_resources
        #: (namespace, name) -> container -> resource -> the ids its Allocate returned
        self.admitted: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
        self._server: grpc.Server | None = None
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []

    @property
    def socket(self) -> Path:
        return self.dir / "kubelet.sock"

    @property
    def pod_resources_socket(self) -> Path:
        return self.dir / "pod-resources.sock"

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket}")
        if self.pod_resources:
            podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(
                _PodResources(self), server
            )
            server.add_insecure_port(f"unix://{self.pod_resources_socket}")
        server.start()
        self._server = server

    def admit(self, name: str, namespace: str = "default") -> None:
        """The kubelet starts admitting a pod: its pod-resources list shows it, no devices."""
        with self._cond:
            self.admitted.setdefault((namespace, name), {})

    def stop(self) -> None:
        """The kubelet goes away: its server stops, its streams to plugins are cancelled."""
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        with self._cond:
            connections = list(self.plugins.values())
            self.plugins.clear()
        for connection in connections:
            connection.channel.close()
        for thread in self._threads:
            thread.join(timeout=WAIT_S)
        self._threads.clear()

    def restart(self) -> None:
        """A kubelet restart: stop, delete every socket in the directory, start again."""
        self.stop()
        for path in self.dir.iterdir():
            if path.is_socket():
                path.unlink()
        self.start()

    # -- registration ------------------------------------------------------------------

    def _connect(self, request: api_pb2.RegisterRequest) -> None:
        channel = grpc.insecure_channel(f"unix://{self.dir / request.endpoint}")
        grpc.channel_ready_future(channel).result(timeout=WAIT_S)
        stub = api_pb2_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=WAIT_S)
        connection = PluginConnection(
            request.resource_name, request.endpoint, channel, stub, options
        )
        with self._cond:
            old = self.plugins.get(request.resource_name)
            self.plugins[request.resource_name] = connection
            self.registrations.append(request)
            self._cond.notify_all()
        if old is not None:
            old.channel.close()
        thread = threading.Thread(target=self._watch, args=(connection,), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _watch(self, connection: PluginConnection) -> None:
        try:
            for answer in connection.stub.ListAndWatch(api_pb2.Empty()):
                listed = [
                    Listed(d.ID, d.health, tuple(n.ID for n in d.topology.nodes))
                    for d in answer.devices
                ]
                with self._cond:
                    connection.lists.append(listed)
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # cancelled: the channel closed, or the plugin's server stopped
        finally:
            with self._cond:
                connection.stream_ended = True
                self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        """Waits until ``predicate`` holds: woken by the kubelet's own news (a registration,
        a list), and every 20 ms for what it does not see (files, the fake API)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}")
                self._cond.wait(timeout=min(left, 0.02))

    def wait_list(
        self, resource: str, predicate: Callable[[list[Listed]], bool], what: str
    ) -> list[Listed]:
        """Waits until the latest list of ``resource`` satisfies ``predicate``."""

        def ok() -> bool:
            connection = self.plugins.get(resource)
            return (
                connection is not None and bool(connection.lists) and predicate(connection.latest)
            )

        self.wait_for(ok, what)
        return self.plugins[resource].latest

    # -- what the device manager asks at admission ------------------------------------------

    def stub(self, resource: str) -> api_pb2_grpc.DevicePluginStub:
        return self.plugins[resource].stub

    def preferred(
        self, resource: str, available: list[str], size: int, must: list[str] | None = None
    ) -> list[str]:
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available,
                    must_include_deviceIDs=must or [],
                    allocation_size=size,
                )
            ]
        )
        answer = self.stub(resource).GetPreferredAllocation(request, timeout=WAIT_S)
        return list(answer.container_responses[0].deviceIDs)

    def allocate(
        self,
        resource: str,
        ids: list[str],
        pod: str | None = None,
        container: str = "main",
        namespace: str = "default",
    ) -> api_pb2.ContainerAllocateResponse:
        """Allocate ``ids`` of ``resource``; with ``pod``, for that pod's ``container``
        (admitted first if it was not, and the ids recorded once the Allocate returned)."""
        if pod is not None:
            self.admit(pod, namespace)
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)]
        )
        answer = self.stub(resource).Allocate(request, timeout=WAIT_S)
        assert len(answer.container_responses) == 1
        if pod is not None:
            with self._cond:
                devices = self.admitted[(namespace, pod)].setdefault(container, {})
                devices.setdefault(resource, []).extend(ids)
        return answer.container_responses[0]

    def pre_start(self, resource: str, ids: list[str]) -> None:
        if not self.plugins[resource].options.pre_start_required:
            raise AssertionError("the kubelet calls PreStartContainer only when asked to")
        self.stub(resource).PreStartContainer(
            api_pb2.PreStartContainerRequest(devices_ids=ids), timeout=WAIT_S
        )


class FakeNodeAPI:
    """The plugin's :class:`~hetsched.k8s.deviceplugin.publisher.NodeAPI`, in memory."""

    def __init__(self) -> None:
        self.node_annotations_of: dict[str, dict[str, str]] = {}
        self.pods: dict[tuple[str, str], PodView] = {}
        self.node_of: dict[tuple[str, str], str] = {}
        self.fail_node_patches = 0
        #: the Events the plugin recorded: (namespace, event)
        self.events: list[tuple[str, dict[str, object]]] = []
        self._lock = threading.Lock()
        self._clock = 0

    def add_pod(
        self,
        name: str,
        node: str,
        limits: Mapping[str, int],
        annotations: Mapping[str, str],
        namespace: str = "default",
    ) -> str:
        """Add a pod; its uid (``uid-<namespace>-<name>``) is returned."""
        with self._lock:
            self._clock += 1
            created = time.strftime("%Y-%m-%dT%H:%M:", time.gmtime(0)) + f"{self._clock:02d}Z"
            self.pods[(namespace, name)] = PodView(
                namespace,
                name,
                f"uid-{namespace}-{name}",
                created,
                MappingProxyType(dict(annotations)),
                MappingProxyType(dict(limits)),
            )
            self.node_of[(namespace, name)] = node
        return f"uid-{namespace}-{name}"

    def annotations_of(self, name: str, namespace: str = "default") -> Mapping[str, str]:
        return self.pods[(namespace, name)].annotations

    def devices_on(self, node: str) -> list[dict[str, object]]:
        value = self.node_annotations_of.get(node, {}).get("hetsched.io/devices", "[]")
        listed: list[dict[str, object]] = json.loads(value)
        return listed

    # NodeAPI

    def node_annotations(self, node: str) -> Mapping[str, str]:
        with self._lock:
            return dict(self.node_annotations_of.get(node, {}))

    def patch_node_annotations(self, node: str, annotations: Mapping[str, str]) -> None:
        with self._lock:
            if self.fail_node_patches > 0:
                self.fail_node_patches -= 1
                raise RuntimeError("the API server is not answering")
            self.node_annotations_of.setdefault(node, {}).update(annotations)

    def pods_on_node(self, node: str) -> list[PodView]:
        with self._lock:
            return [p for key, p in self.pods.items() if self.node_of[key] == node]

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> None:
        with self._lock:
            pod = self.pods[(namespace, name)]
            merged = {**pod.annotations, **annotations}
            self.pods[(namespace, name)] = PodView(
                pod.namespace, pod.name, pod.uid, pod.created, MappingProxyType(merged), pod.limits
            )

    def create_event(self, namespace: str, event: Mapping[str, object]) -> None:
        with self._lock:
            self.events.append((namespace, dict(event)))
