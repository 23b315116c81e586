"""The ``DevicePlugin`` gRPC service: one servicer per advertised resource.

A :class:`DeviceTable` holds this node's devices of one class, as the device watcher last
saw them; every servicer reads it, and each ListAndWatch stream sends the whole list again
when it changes. The whole resource (``hetsched.io/gpu``) lists the devices by kubelet id;
the shared one (``hetsched.io/gpu-shared``) lists ``slots`` ids per device, all of a
device's slots as healthy as the device. An :class:`Allocator`, shared by both servicers,
finds the pod an Allocate is for, decides whether its assignment is honoured
(:mod:`.matching`) and marks it allocated.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import grpc

from hetsched.k8s.deviceplugin import api_pb2, api_pb2_grpc
from hetsched.k8s.deviceplugin.allocation import (
    PHASE_ALLOCATED,
    Assignment,
    MountSpec,
    Roots,
    build_response,
    control_nodes,
    device_nodes,
    is_healthy,
    kubelet_id,
    physical_id,
    preferred_devices,
    preferred_slots,
    slot_ids,
)
from hetsched.k8s.deviceplugin.matching import (
    AssignedDevice,
    Decision,
    Pending,
    allocated_key,
    decide,
    pending,
    preferred,
)
from hetsched.k8s.deviceplugin.podresources import KubeletPods
from hetsched.k8s.deviceplugin.publisher import NodeAPI, PodView
from hetsched.k8s.names import ASSIGN_PHASE
from hetsched.model.device import Device

__all__ = ["Allocator", "DevicePluginServicer", "DeviceTable", "Refused"]

log = logging.getLogger("hetsched.k8s.deviceplugin")

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
#: the Event reason when the kubelet's choice is not the scheduler's
ASSIGNMENT_NOT_HONOURED = "AssignmentNotHonoured"
#: who reports the plugin's Events
COMPONENT = "hetsched-device-plugin"


class DeviceTable:
    """This node's devices of one class by kubelet id, with a version that changes with them.
    Safe from any thread."""

    def __init__(self, devices: Iterable[Device] = ()) -> None:
        self._cond = threading.Condition()
        self._devices: dict[str, Device] = {}
        self._version = 0
        self.update(devices)

    def update(self, devices: Iterable[Device]) -> bool:
        """Replace the devices; True (and a new version) when anything changed."""
        fresh = {kubelet_id(d.id): d for d in devices}
        with self._cond:
            if fresh == self._devices:
                return False
            self._devices = fresh
            self._version += 1
            self._cond.notify_all()
            return True

    def snapshot(self) -> tuple[int, dict[str, Device]]:
        with self._cond:
            return self._version, dict(self._devices)

    def wait_change(self, version: int, timeout_s: float) -> int:
        """The current version, once it differs from ``version`` or ``timeout_s`` passed."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout=timeout_s)
            return self._version

    def wake(self) -> None:
        """Wake the waiting streams (one of them may have been cancelled)."""
        with self._cond:
            self._cond.notify_all()


class Refused(Exception):
    """An Allocate the plugin cannot honour; the message goes back to the kubelet."""


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Allocator:
    """Finds the pod an Allocate is for and whether its assignment is honoured (see
    :mod:`.matching`), marks it, and says so in an Event when it is not.

    Without an API (``api`` None) every Allocate is answered from the kubelet's ids alone.
    ``kubelet`` is the kubelet's pod-resources API (None: matching without it). One lock
    serialises the search and the mark, so two Allocates never take one pod.
    """

    api: NodeAPI | None
    node: str
    #: the class of the devices this plugin hands out; None: every assigned device counts
    device_class: str | None = None
    kubelet: KubeletPods | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: (pod uid, resource) this plugin handed out (the annotation may not show it yet)
    _taken: set[tuple[str, str]] = field(default_factory=set)

    def _pending(self, resource: str, shared: bool, known: set[str]) -> list[Pending]:
        assert self.api is not None
        pods = self.api.pods_on_node(self.node)
        on_node = {p.uid for p in pods}
        self._taken = {t for t in self._taken if t[0] in on_node}
        view = self.kubelet.devices(resource) if self.kubelet is not None else None
        return pending(
            pods, self.node, resource, self.device_class, shared, known, view, self._taken
        )

    def prefer(
        self, resource: str, size: int, shared: bool, known: set[str]
    ) -> list[AssignedDevice] | None:
        """The scheduler's devices to steer the kubelet to, without taking them."""
        if self.api is None:
            return None
        try:
            with self._lock:
                return preferred(self._pending(resource, shared, known), size)
        except Exception as exc:
            log.warning("cannot read the pods on %s: %s", self.node, exc)
            return None

    def take(self, resource: str, ids: list[str], slots: int, known: set[str]) -> Decision:
        """The decision for this Allocate (``slots``: per device of the shared resource, 0
        for whole devices); the honoured pod is marked allocated."""
        shared = slots > 0
        if self.api is None:
            return decide([], resource, ids, shared, slots)
        with self._lock:
            try:
                candidates = self._pending(resource, shared, known)
            except Exception as exc:
                raise Refused(f"cannot list the pods on node {self.node}: {exc}") from exc
            decision = decide(candidates, resource, ids, shared, slots)
            if decision.pod is not None:
                self._mark(decision.pod, resource, ids)
        if decision.warning:
            log.warning("Allocate %s %s: %s", resource, ids, decision.warning)
            self._event(decision.passed_over, decision.warning)
        return decision

    def _mark(self, pod: PodView, resource: str, ids: list[str]) -> None:
        self._taken.add((pod.uid, resource))
        given = ",".join(f"{self.node}/{i}" for i in ids)
        try:
            self.api.patch_pod_annotations(  # type: ignore[union-attr]
                pod.namespace,
                pod.name,
                {ASSIGN_PHASE: PHASE_ALLOCATED, allocated_key(resource): given},
            )
        except Exception as exc:
            # the devices are handed out all the same: _taken keeps the pod from being
            # matched again while its annotation does not show it
            log.warning("cannot mark pod %s/%s allocated: %s", pod.namespace, pod.name, exc)
        log.info("allocate %s for pod %s/%s: %s", resource, pod.namespace, pod.name, given)

    def _event(self, pod: PodView | None, message: str) -> None:
        """A Warning Event on the pod whose assignment was passed over (on the Node when
        the plugin cannot tell which pod)."""
        if self.api is None:
            return
        stamp = _stamp()
        if pod is not None:
            namespace = pod.namespace
            regarding = {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
            }
        else:
            namespace = "default"
            regarding = {"apiVersion": "v1", "kind": "Node", "name": self.node}
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{regarding['name']}.", "namespace": namespace},
            "involvedObject": regarding,
            "reason": ASSIGNMENT_NOT_HONOURED,
            "message": message[:1024],
            "type": "Warning",
            "action": "Allocate",
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.api.create_event(namespace, event)
        except Exception as exc:
            log.warning("cannot record an event on %s: %s", regarding["name"], exc)


class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    """The kubelet's view of one resource. ``slots`` 0: whole devices; ``slots`` n > 0: the
    shared resource, n slots per device."""

    def __init__(
        self,
        resource: str,
        table: DeviceTable,
        allocator: Allocator,
        *,
        slots: int = 0,
        roots: Roots | None = None,
        mounts: Sequence[MountSpec] = (),
        pre_start_required: bool = False,
    ) -> None:
        self.resource = resource
        self.table = table
        self.allocator = allocator
        self.slots = slots
        self.roots = roots or Roots()
        self.mounts = tuple(mounts)
        self.pre_start_required = pre_start_required
        #: set when this servicer's server stops: its streams end
        self.stopping = threading.Event()

    @property
    def shared(self) -> bool:
        return self.slots > 0

    def stop(self) -> None:
        self.stopping.set()
        self.table.wake()

    # -- the device list ---------------------------------------------------------------

    def device_list(self, devices: Mapping[str, Device]) -> api_pb2.ListAndWatchResponse:
        response = api_pb2.ListAndWatchResponse()
        for kid in sorted(devices):
            device = devices[kid]
            health = HEALTHY if is_healthy(device) else UNHEALTHY
            numa = device.attributes.get("numa")
            topology = None
            if isinstance(numa, int) and not isinstance(numa, bool):
                topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=numa)])
            for id_ in slot_ids(kid, self.slots) if self.shared else [kid]:
                response.devices.append(api_pb2.Device(ID=id_, health=health, topology=topology))
        return response

    # -- RPCs --------------------------------------------------------------------------

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=self.pre_start_required,
            get_preferred_allocation_available=True,
        )

    def ListAndWatch(
        self, request: api_pb2.Empty, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        # the kubelet keeps this stream open for the plugin's life; a cancelled stream or a
        # stopping server wakes the wait at once
        context.add_callback(self.table.wake)
        version, devices = self.table.snapshot()
        yield self.device_list(devices)
        while context.is_active() and not self.stopping.is_set():
            latest = self.table.wait_change(version, timeout_s=1.0)
            if latest != version and context.is_active() and not self.stopping.is_set():
                version, devices = self.table.snapshot()
                yield self.device_list(devices)

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreferredAllocationResponse:
        _, devices = self.table.snapshot()
        known = {d.id for d in devices.values()}
        response = api_pb2.PreferredAllocationResponse()
        for req in request.container_requests:
            size = int(req.allocation_size)
            chosen = self.allocator.prefer(self.resource, size, self.shared, known)
            chosen_ids = [kubelet_id(a.id) for a in chosen or []]
            if self.shared:
                ids = preferred_slots(
                    list(req.available_deviceIDs),
                    list(req.must_include_deviceIDs),
                    size,
                    chosen_ids[0] if chosen_ids else None,
                )
            else:
                ids = preferred_devices(
                    list(req.available_deviceIDs),
                    list(req.must_include_deviceIDs),
                    size,
                    devices,
                    chosen_ids or None,
                )
            response.container_responses.append(
                api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids)
            )
        return response

    def Allocate(
        self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocateResponse:
        response = api_pb2.AllocateResponse()
        for req in request.container_requests:
            try:
                assignments = self._assignments(list(req.devices_ids))
            except Refused as exc:
                log.warning("Allocate %s %s refused: %s", self.resource, list(req.devices_ids), exc)
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            nodes = device_nodes_for(assignments, self.roots)
            response.container_responses.append(build_response(assignments, nodes, self.mounts))
        return response

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api_pb2.PreStartContainerResponse:
        # nothing to reset on a GPU; an FPGA backend would re-flash here. A device that
        # turned unhealthy since Allocate fails the container start.
        _, devices = self.table.snapshot()
        for id_ in request.devices_ids:
            device = devices.get(physical_id(id_))
            if device is None or not is_healthy(device):
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"device {id_} is not healthy")
        return api_pb2.PreStartContainerResponse()

    # -- Allocate's decision -------------------------------------------------------------

    def _assignments(self, ids: list[str]) -> list[Assignment]:
        """The kubelet's devices, never others (the kubelet counts them as taken), with
        the shares the scheduler assigned when its assignment is honoured."""
        _, devices = self.table.snapshot()
        for id_ in ids:
            device = devices.get(physical_id(id_))
            if device is None:
                raise Refused(f"unknown device {id_}")
            if not is_healthy(device):
                raise Refused(f"device {id_} is unhealthy")
        known = {d.id for d in devices.values()}
        decision = self.allocator.take(self.resource, ids, self.slots, known)
        per_device: dict[str, int] = {}
        for id_, share in decision.shares.items():
            per_device.setdefault(physical_id(id_), share)
        return [Assignment(devices[p], share) for p, share in per_device.items()]


def device_nodes_for(assignments: Sequence[Assignment], roots: Roots) -> list[str]:
    """The device nodes of the assigned devices, then their vendors' control nodes."""
    nodes: list[str] = []
    for a in assignments:
        nodes += device_nodes(a.device, roots)
    nodes += control_nodes((a.device.vendor for a in assignments), roots)
    return nodes
