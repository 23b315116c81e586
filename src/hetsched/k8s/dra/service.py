"""The gRPC services of the DRA driver, as the kubelet calls them.

- ``DRAPlugin`` v1 and v1beta1 (the same calls; the kubelet picks v1 when the driver offers
  it) on the driver's socket: NodePrepareResources and NodeUnprepareResources, answered by a
  :class:`~hetsched.k8s.dra.prepare.Preparer`; every claim of a request gets an entry;
- ``DRAResourceHealth`` v1 on the same socket: NodeWatchResources streams every device the
  driver ever saw with its health (a removed one unhealthy, ``removed``), at once, again as
  soon as it changes, and again every :attr:`HealthTiming.interval_s` when nothing changes.
  The kubelet counts a device whose health it has not heard within the device's
  ``health_check_timeout_seconds`` (its own default, 30 s, when unset) as Unknown, from the
  ``last_updated_time`` the driver sends: so every list carries the time it was determined
  (now, not when the health last changed) and each device the timeout the driver keeps to,
  :attr:`HealthTiming.timeout_s`, a few intervals long;
- ``pluginregistration.Registration`` on the registration socket: GetInfo says what the
  plugin is (a ``DRAPlugin`` named after the driver, its socket, its services);
  NotifyRegistrationStatus is the kubelet's verdict, kept in :class:`RegistrationState`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import grpc

from hetsched.k8s.dra.api import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    registration_v1_pb2,
    registration_v1_pb2_grpc,
)
from hetsched.k8s.dra.book import DeviceBook
from hetsched.k8s.dra.prepare import Preparer, describe, refs

__all__ = [
    "HEALTH_SERVICE",
    "PLUGIN_TYPE",
    "SERVICES",
    "DRAPluginV1",
    "DRAPluginV1beta1",
    "Health",
    "HealthTiming",
    "Registration",
    "RegistrationState",
]

log = logging.getLogger("hetsched.k8s.dra")

#: the plugin type a DRA driver registers as
PLUGIN_TYPE = "DRAPlugin"
#: the services advertised at registration, newest first
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
HEALTH_SERVICE = "v1.DRAResourceHealth"
#: the longest health message the kubelet keeps
_MESSAGE_LIMIT = 1024


class DRAPluginV1(dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer

    def NodePrepareResources(
        self, request: dra_v1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        outcomes = self.preparer.prepare(refs(request.claims))
        log.debug("NodePrepareResources v1: %s", describe(outcomes))
        response = dra_v1_pb2.NodePrepareResourcesResponse()
        for uid, outcome in outcomes.items():
            entry = response.claims[uid]
            entry.error = outcome.error
            for device in outcome.devices:
                message = entry.devices.add(
                    request_names=device.requests,
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=device.cdi_ids,
                )
                if device.share_id:
                    message.share_id = device.share_id
        return response

    def NodeUnprepareResources(
        self, request: dra_v1_pb2.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
        outcomes = self.preparer.unprepare(refs(request.claims))
        response = dra_v1_pb2.NodeUnprepareResourcesResponse()
        for uid, outcome in outcomes.items():
            response.claims[uid].error = outcome.error
        return response


class DRAPluginV1beta1(dra_v1beta1_pb2_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer

    def NodePrepareResources(
        self,
        request: dra_v1beta1_pb2.NodePrepareResourcesRequest,
        context: grpc.ServicerContext,
    ) -> dra_v1beta1_pb2.NodePrepareResourcesResponse:
        outcomes = self.preparer.prepare(refs(request.claims))
        response = dra_v1beta1_pb2.NodePrepareResourcesResponse()
        for uid, outcome in outcomes.items():
            entry = response.claims[uid]
            entry.error = outcome.error
            for device in outcome.devices:
                entry.devices.add(
                    request_names=device.requests,
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=device.cdi_ids,
                )
        return response

    def NodeUnprepareResources(
        self,
        request: dra_v1beta1_pb2.NodeUnprepareResourcesRequest,
        context: grpc.ServicerContext,
    ) -> dra_v1beta1_pb2.NodeUnprepareResourcesResponse:
        outcomes = self.preparer.unprepare(refs(request.claims))
        response = dra_v1beta1_pb2.NodeUnprepareResourcesResponse()
        for uid, outcome in outcomes.items():
            response.claims[uid].error = outcome.error
        return response


@dataclass(frozen=True, slots=True)
class HealthTiming:
    """How often the health stream speaks when nothing changes, and the timeout it asks
    the kubelet to keep per device (a few intervals, so that one late list is harmless)."""

    interval_s: float = 10.0
    timeout_s: int = 30
    #: how often a stream looks at the clock between changes (a change wakes it at once)
    poll_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.interval_s < self.timeout_s or self.poll_s <= 0:
            raise ValueError(
                f"health interval {self.interval_s} s must be above 0 and below the timeout "
                f"{self.timeout_s} s, and the poll above 0"
            )


class Health(health_v1_pb2_grpc.DRAResourceHealthServicer):
    """The device health stream; ``pool`` is the driver's pool on this node. ``clock``
    gives the Unix time each list is determined at (a test hands in its own)."""

    def __init__(
        self,
        book: DeviceBook,
        pool: str,
        timing: HealthTiming | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.book = book
        self.pool = pool
        self.timing = timing or HealthTiming()
        self.clock = clock
        #: set when the server stops: the streams end
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()
        self.book.wake()

    def health_list(self) -> tuple[int, health_v1_pb2.NodeWatchResourcesResponse]:
        version, _, health = self.book.snapshot()
        now = int(self.clock())
        response = health_v1_pb2.NodeWatchResourcesResponse()
        for name in sorted(health):
            entry = health[name]
            response.devices.add(
                device=health_v1_pb2.DeviceIdentifier(pool_name=self.pool, device_name=name),
                health=health_v1_pb2.HEALTHY if entry.healthy else health_v1_pb2.UNHEALTHY,
                last_updated_time=now,
                health_check_timeout_seconds=self.timing.timeout_s,
                message=entry.message[:_MESSAGE_LIMIT],
            )
        return version, response

    def NodeWatchResources(
        self, request: health_v1_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[health_v1_pb2.NodeWatchResourcesResponse]:
        # the kubelet keeps the stream open; a cancelled stream or a stopping server ends it
        context.add_callback(self.book.wake)
        version, response = self.health_list()
        sent = self.clock()
        yield response
        while context.is_active() and not self.stopping.is_set():
            latest = self.book.wait_change(version, timeout_s=self.timing.poll_s)
            if not context.is_active() or self.stopping.is_set():
                break
            if latest != version or self.clock() - sent >= self.timing.interval_s:
                version, response = self.health_list()
                sent = self.clock()
                yield response


@dataclass
class RegistrationState:
    """What the kubelet said of the registration: None until it said anything."""

    registered: bool | None = None
    error: str = ""
    notified: threading.Event = field(default_factory=threading.Event)


class Registration(registration_v1_pb2_grpc.RegistrationServicer):
    def __init__(
        self, driver: str, endpoint: str, services: Sequence[str], state: RegistrationState
    ) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.services = list(services)
        self.state = state

    def GetInfo(
        self, request: registration_v1_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> registration_v1_pb2.PluginInfo:
        return registration_v1_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=self.services,
        )

    def NotifyRegistrationStatus(
        self, request: registration_v1_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> registration_v1_pb2.RegistrationStatusResponse:
        self.state.registered = request.plugin_registered
        self.state.error = request.error
        self.state.notified.set()
        if request.plugin_registered:
            log.info("registered with the kubelet as DRA driver %s", self.driver)
        else:
            log.error("the kubelet refused DRA driver %s: %s", self.driver, request.error)
        return registration_v1_pb2.RegistrationStatusResponse()
