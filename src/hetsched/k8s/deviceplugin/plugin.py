"""The device plugin's life: serve, register, watch devices and the kubelet, re-register.

For each advertised resource (the whole one, and the shared one when ``shared_slots`` > 0)
an :class:`Endpoint` serves ``DevicePlugin`` on its own socket in the device-plugins
directory, **then** registers with the kubelet on ``kubelet.sock`` (the kubelet dials back
during Register, so the socket must already answer).

Registration is not durable. A restarted kubelet deletes every socket in the directory and
creates a new ``kubelet.sock``; the plugin's loop checks every ``socket_check_interval_s``
whether its socket is gone (then it serves again on a new one) and whether it is registered
with the ``kubelet.sock`` that exists now (by inode and change time); if not, it registers
again, retrying until the kubelet answers.

The devices come from a :class:`~hetsched.agent.watcher.DeviceWatcher`: every change it
finds (hot-plug, unplug, health) updates the :class:`DeviceTable`, which wakes the
ListAndWatch streams, and rewrites the Node annotation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import grpc

from hetsched.agent.watcher import DeviceWatcher
from hetsched.k8s.deviceplugin import api_pb2, api_pb2_grpc
from hetsched.k8s.deviceplugin.allocation import MountSpec, Roots
from hetsched.k8s.deviceplugin.podresources import PodResources
from hetsched.k8s.deviceplugin.publisher import NodeAPI, NodePublisher
from hetsched.k8s.deviceplugin.server import Allocator, DevicePluginServicer, DeviceTable
from hetsched.k8s.names import SHARED_SUFFIX
from hetsched.model.device import Device
from hetsched.scheduler.events import Event

__all__ = [
    "API_VERSION",
    "DEFAULT_PLUGIN_DIR",
    "KUBELET_SOCKET",
    "DevicePlugin",
    "Endpoint",
    "PluginSettings",
    "socket_name",
]

log = logging.getLogger("hetsched.k8s.deviceplugin")

API_VERSION = "v1beta1"
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
#: how long Register may take (the kubelet dials us back inside it, for up to 10 s)
REGISTER_TIMEOUT_S = 15.0


def socket_name(resource: str) -> str:
    """``hetsched.io/gpu-shared`` -> ``hetsched-gpu-shared.sock``."""
    return f"hetsched-{resource.rsplit('/', 1)[-1]}.sock"


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """What a device plugin process serves, and where (validated by the CLI)."""

    #: the whole-device resource, ``hetsched.io/gpu``
    resource: str
    #: this node's name (the pods and the Node annotation are looked up by it)
    node_name: str
    #: the device class advertised (default: the resource's name after the domain)
    device_class: str = ""
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    #: slots per device of the shared resource; 0: no shared resource
    shared_slots: int = 0
    #: the shared resource (default: ``<resource>-shared``)
    shared_resource: str = ""
    pre_start_required: bool = False
    socket_check_interval_s: float = 0.5
    #: how often the Node annotation is read and rewritten even when nothing changed here
    annotation_resync_s: float = 60.0
    roots: Roots = field(default_factory=Roots)
    mounts: tuple[MountSpec, ...] = ()
    #: the kubelet's pod-resources socket (None: match Allocates to pods without it)
    pod_resources_socket: Path | None = None

    @property
    def device_class_name(self) -> str:
        return self.device_class or self.resource.rsplit("/", 1)[-1]

    @property
    def shared_resource_name(self) -> str:
        return self.shared_resource or f"{self.resource}{SHARED_SUFFIX}"


@dataclass
class Endpoint:
    """One resource's socket, server and registration."""

    resource: str
    plugin_dir: Path
    make_servicer: Callable[[], DevicePluginServicer]
    pre_start_required: bool = False
    server: grpc.Server | None = None
    servicer: DevicePluginServicer | None = None
    #: identity of the kubelet.sock we registered with; None: not registered
    registered_with: tuple[int, int, int] | None = None
    _said: str = ""

    @property
    def socket(self) -> Path:
        return self.plugin_dir / socket_name(self.resource)

    def serve(self) -> None:
        """Serve on a fresh socket (a stale one is removed first)."""
        self.shutdown()
        self.socket.unlink(missing_ok=True)
        servicer: DevicePluginServicer = self.make_servicer()
        # each ListAndWatch stream holds a worker for the plugin's life
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_DevicePluginServicer_to_server(servicer, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self.server, self.servicer = server, servicer
        self.registered_with = None
        log.info("serving %s on %s", self.resource, self.socket)

    def shutdown(self) -> None:
        if self.servicer is not None:
            self.servicer.stop()
        if self.server is not None:
            self.server.stop(grace=None).wait(5)
        self.server = self.servicer = None

    def register(self) -> bool:
        """Register with the kubelet now; False (logged once per reason) when it fails."""
        kubelet = self.plugin_dir / KUBELET_SOCKET
        inode = _identity(kubelet)
        if inode is None:
            self._say(f"waiting for the kubelet: {kubelet} does not exist")
            return False
        request = api_pb2.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket.name,
            resource_name=self.resource,
            options=api_pb2.DevicePluginOptions(
                pre_start_required=self.pre_start_required,
                get_preferred_allocation_available=True,
            ),
        )
        try:
            with grpc.insecure_channel(f"unix://{kubelet}") as channel:
                api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT_S)
        except grpc.RpcError as exc:
            self._say(f"registering {self.resource} with the kubelet failed: {exc}")
            return False
        self.registered_with = inode
        self._said = ""
        log.info("registered %s with the kubelet (%s)", self.resource, self.socket.name)
        return True

    def check(self) -> None:
        """Called by the plugin's loop: serve again if our socket is gone, register again if
        not registered with the kubelet.sock that exists now."""
        if self.server is None or not self.socket.exists():
            if self.server is not None:
                log.info("%s disappeared (kubelet restart?): serving again", self.socket)
            self.serve()
        if self.registered_with is None or (
            _identity(self.plugin_dir / KUBELET_SOCKET) != self.registered_with
        ):
            self.register()

    def _say(self, line: str) -> None:
        if line != self._said:
            self._said = line
            log.warning(line)


def _identity(path: Path) -> tuple[int, int, int] | None:
    """Which file ``path`` is now: device, inode and change time (a file system may give a
    new socket the inode of the one just deleted)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


def _class_devices(watcher: DeviceWatcher, device_class: str) -> list[Device]:
    # called from the watcher's own thread (its sink) or before it starts: present is stable
    return [d for d in watcher.present.values() if d.device_class == device_class]


@dataclass
class DevicePlugin:
    """One process's device plugin: its endpoints, the device watcher, the Node annotation."""

    settings: PluginSettings
    watcher: DeviceWatcher
    api: NodeAPI | None = None
    table: DeviceTable = field(default_factory=DeviceTable)
    endpoints: list[Endpoint] = field(default_factory=list)
    publisher: NodePublisher | None = None
    kubelet: PodResources | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        s = self.settings
        if s.pod_resources_socket is not None:
            self.kubelet = PodResources(s.pod_resources_socket)
        allocator = Allocator(self.api, s.node_name, s.device_class_name, self.kubelet)
        if self.api is not None:
            self.publisher = NodePublisher(self.api, s.node_name, s.device_class_name)

        def servicer(resource: str, slots: int) -> DevicePluginServicer:
            return DevicePluginServicer(
                resource,
                self.table,
                allocator,
                slots=slots,
                roots=s.roots,
                mounts=s.mounts,
                pre_start_required=s.pre_start_required,
            )

        resources: list[tuple[str, int]] = [(s.resource, 0)]
        if s.shared_slots > 0:
            resources.append((s.shared_resource_name, s.shared_slots))
        self.endpoints = [
            Endpoint(r, s.plugin_dir, partial(servicer, r, n), s.pre_start_required)
            for r, n in resources
        ]

    def start(self) -> None:
        """Discover, serve, register, then watch in the background."""
        self.watcher.initial()
        self._refresh()
        self.watcher.sink = self._on_events
        self.watcher.start()
        for endpoint in self.endpoints:
            endpoint.serve()
            endpoint.register()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="hetsched-deviceplugin", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and remove the sockets; safe to call more than once, or after a
        :meth:`start` that failed half-way."""
        self._stop.set()
        if self._thread is not None and self._thread.ident is not None:
            self._thread.join(timeout=10)
        self._thread = None
        self.watcher.stop()
        for endpoint in self.endpoints:
            endpoint.shutdown()
            endpoint.socket.unlink(missing_ok=True)
        if self.kubelet is not None:
            self.kubelet.close()

    def _on_events(self, events: Sequence[Event]) -> None:
        self._refresh()

    def _refresh(self) -> None:
        devices = _class_devices(self.watcher, self.settings.device_class_name)
        if self.table.update(devices):
            log.info(
                "devices: %s",
                ", ".join(f"{d.id} ({d.health.value})" for d in devices) or "none",
            )
        if self.publisher is not None:
            self.publisher.publish(devices)

    def _run(self) -> None:
        resync_at = time.monotonic() + self.settings.annotation_resync_s
        while not self._stop.wait(self.settings.socket_check_interval_s):
            for endpoint in self.endpoints:
                try:
                    endpoint.check()
                except Exception:
                    log.exception("device plugin endpoint %s", endpoint.resource)
            if self.publisher is not None:
                # a write that failed earlier is tried again; now and then a full resync
                force = time.monotonic() >= resync_at
                if force:
                    resync_at = time.monotonic() + self.settings.annotation_resync_s
                _, devices = self.table.snapshot()
                self.publisher.publish(devices.values(), force=force)
