"""The DRA driver's life: discover, publish, serve, register, watch, and start again.

1. The device watcher discovers this node's devices (the backends of ``hetsched up``), and
   every change it finds later (hot-plug, unplug, health) updates the
   :class:`~hetsched.k8s.dra.book.DeviceBook`, which rewrites the ResourceSlices and wakes
   the health streams.
2. It serves ``DRAPlugin`` v1 and v1beta1 and ``DRAResourceHealth`` v1 on
   ``<plugins_dir>/<driver>/dra.sock``, **then** ``pluginregistration.Registration`` on
   ``<registry_dir>/<driver>-reg.sock``: the kubelet's plugin watcher finds that socket,
   asks GetInfo and dials the DRA socket it names.
3. Prepared claims are kept in ``<plugins_dir>/<driver>/checkpoint.json`` and their CDI
   specs in ``cdi_dir``; both outlive the process, so a restarted driver answers the
   kubelet as before (a stale socket of the last run is removed first).
4. Every ``socket_check_interval_s`` its loop serves again on a socket that was deleted
   (the kubelet then finds and registers it again), and every ``slice_resync_s`` it rewrites
   the slices even without a change.

:meth:`DraDriver.stop` stops serving and removes both sockets (the kubelet then
deregisters the driver); the checkpoint, the CDI specs and the ResourceSlices stay.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc

from hetsched.agent.watcher import DeviceWatcher
from hetsched.k8s.deviceplugin.allocation import MountSpec, Roots
from hetsched.k8s.dra.api import (
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2_grpc,
    registration_v1_pb2_grpc,
)
from hetsched.k8s.dra.book import DeviceBook
from hetsched.k8s.dra.checkpoint import Checkpoint
from hetsched.k8s.dra.prepare import ClaimReader, Preparer
from hetsched.k8s.dra.service import (
    HEALTH_SERVICE,
    SERVICES,
    DRAPluginV1,
    DRAPluginV1beta1,
    Health,
    HealthTiming,
    Registration,
    RegistrationState,
)
from hetsched.k8s.dra.slices import SliceAPI, SlicePublisher
from hetsched.model.device import Device
from hetsched.scheduler.events import Event

__all__ = [
    "DEFAULT_CDI_DIR",
    "DEFAULT_DRIVER",
    "DEFAULT_PLUGINS_DIR",
    "DEFAULT_REGISTRY_DIR",
    "DraDriver",
    "DriverAPI",
    "DriverSettings",
]

log = logging.getLogger("hetsched.k8s.dra")

DEFAULT_DRIVER = "hetsched.io"
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_CDI_DIR = Path("/var/run/cdi")


class DriverAPI(ClaimReader, SliceAPI, Protocol):
    """Every API server call the driver makes (``KubeClusterAPI`` has them all)."""


@dataclass(frozen=True, slots=True)
class DriverSettings:
    """What a DRA driver process serves, and where (validated by the CLI)."""

    node_name: str
    driver_name: str = DEFAULT_DRIVER
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    cdi_dir: Path = DEFAULT_CDI_DIR
    #: the device classes published (empty: every class found)
    classes: tuple[str, ...] = ()
    #: classes whose devices may go to several claims (consumable capacity ``share``)
    shareable: tuple[str, ...] = ("gpu",)
    socket_check_interval_s: float = 0.5
    slice_resync_s: float = 60.0
    roots: Roots = field(default_factory=Roots)
    mounts: tuple[MountSpec, ...] = ()
    #: how often the health stream speaks, and the per-device timeout it asks for
    health: HealthTiming = field(default_factory=HealthTiming)

    @property
    def data_dir(self) -> Path:
        """Where the DRA socket and the checkpoint live."""
        return self.plugins_dir / self.driver_name

    @property
    def socket(self) -> Path:
        return self.data_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver_name}-reg.sock"


@dataclass
class DraDriver:
    settings: DriverSettings
    watcher: DeviceWatcher
    api: DriverAPI
    book: DeviceBook = field(default_factory=DeviceBook)
    registration: RegistrationState = field(default_factory=RegistrationState)
    #: the Unix time the health stream reports its lists at (a test hands in its own)
    clock: Callable[[], float] = time.time
    _servers: list[grpc.Server] = field(default_factory=list)
    _health: Health | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        s = self.settings
        self.publisher = SlicePublisher(self.api, s.driver_name, s.node_name, s.shareable)
        self.checkpoint: Checkpoint | None = None
        self.preparer: Preparer | None = None

    def _devices(self) -> list[Device]:
        wanted = set(self.settings.classes)
        return [d for d in self.watcher.present.values() if not wanted or d.device_class in wanted]

    def _refresh(self, events: Sequence[Event] = ()) -> None:
        wanted = set(self.settings.classes)
        devices = self._devices()
        states = [s for s in self.watcher.view() if not wanted or s.device_class in wanted]
        if self.book.update(devices, states):
            log.info(
                "devices: %s",
                ", ".join(f"{d.id} ({d.health.value})" for d in devices) or "none",
            )
        self.publisher.publish(devices)

    def start(self) -> None:
        """Discover, publish, serve, register, then watch in the background."""
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint = Checkpoint(s.data_dir / "checkpoint.json")
        self.preparer = Preparer(
            s.driver_name,
            s.node_name,
            self.api,
            self.book,
            self.checkpoint,
            s.cdi_dir,
            s.roots,
            s.mounts,
        )
        self.watcher.initial()
        self._refresh()
        self.watcher.sink = self._refresh
        self.watcher.start()
        self._serve()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="hetsched-dra", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """Serve the DRA socket, then the registration socket (stale files removed)."""
        self._shutdown()
        s = self.settings
        assert self.preparer is not None
        for path in (s.socket, s.registration_socket):
            path.unlink(missing_ok=True)
        # each health stream holds a worker for as long as the kubelet watches
        plugin = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(DRAPluginV1(self.preparer), plugin)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
            DRAPluginV1beta1(self.preparer), plugin
        )
        self._health = Health(self.book, s.node_name, s.health, self.clock)
        health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(self._health, plugin)
        plugin.add_insecure_port(f"unix://{s.socket}")
        plugin.start()
        registrar = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        registration = Registration(
            s.driver_name, str(s.socket), [*SERVICES, HEALTH_SERVICE], self.registration
        )
        registration_v1_pb2_grpc.add_RegistrationServicer_to_server(registration, registrar)
        registrar.add_insecure_port(f"unix://{s.registration_socket}")
        registrar.start()
        self._servers = [plugin, registrar]
        log.info("serving DRA driver %s on %s", s.driver_name, s.socket)

    def _shutdown(self) -> None:
        if self._health is not None:
            self._health.stop()
        for server in self._servers:
            server.stop(grace=None).wait(5)
        self._servers = []
        self._health = None

    def stop(self) -> None:
        """Stop serving and remove the sockets; safe to call more than once, or after a
        :meth:`start` that failed half-way."""
        self._stop.set()
        if self._thread is not None and self._thread.ident is not None:
            self._thread.join(timeout=10)
        self._thread = None
        self.watcher.stop()
        self._shutdown()
        for path in (self.settings.socket, self.settings.registration_socket):
            path.unlink(missing_ok=True)

    def _run(self) -> None:
        s = self.settings
        resync_at = time.monotonic() + s.slice_resync_s
        while not self._stop.wait(s.socket_check_interval_s):
            try:
                if not s.socket.exists() or not s.registration_socket.exists():
                    log.info("a socket of DRA driver %s disappeared: serving again", s.driver_name)
                    self._serve()
                force = time.monotonic() >= resync_at
                if force:
                    resync_at = time.monotonic() + s.slice_resync_s
                # a write that failed earlier is tried again; now and then a full resync
                self.publisher.publish(self._devices(), force=force)
            except Exception:
                log.exception("DRA driver loop")
