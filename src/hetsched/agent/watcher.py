"""Watching this machine's devices: hot-plug and health.

A :class:`DeviceWatcher` runs its discovery backends every ``interval_s`` seconds (sooner
when pyudev is installed and the kernel announces a PCI or DRM change) and compares the
answer with the last one. What changed becomes core events:

- a device that is no longer found: ``DeviceHealthChanged(id, unhealthy, "removed")``;
- a device whose health changed: ``DeviceHealthChanged(id, health, "unhealthy: XID 79")``;
- a device never seen: ``DeviceAdded(node, device)`` with a new id;
- a device that comes back: ``DeviceAdded(node, device)`` with the id it had (the core
  takes it as a health change).

Devices are told apart by their backend's key (PCI address, NVML UUID), so a device keeps
its id across an unplug and ids are never reused for another device. A backend that raises
(a half-written fake file, a driver in the middle of a reset) is taken to answer what it
answered last time: a failing probe never looks like every device unplugged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from hetsched.agent.backends import (
    Backend,
    DiscoveryContext,
    FoundDevice,
    assign_ids,
    create,
    merge,
)
from hetsched.agent.discovery import node_from
from hetsched.model.device import Device, Health, Node
from hetsched.scheduler.events import DeviceAdded, DeviceHealthChanged, Event

__all__ = ["DeviceState", "DeviceWatcher", "NodeWatcher"]

log = logging.getLogger("hetsched.agent.watcher")


@dataclass(frozen=True, slots=True)
class DeviceState:
    """What the watcher knows of one device, for views (API, UI, metrics)."""

    id: str
    key: str
    device_class: str
    vendor: str
    model: str
    present: bool
    health: Health
    reason: str
    #: when it came to be as it is (wall clock; 0: at the first discovery)
    since: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": self.since or None,
            "id": self.id,
            "key": self.key,
            "class": self.device_class,
            "vendor": self.vendor,
            "model": self.model,
            "present": self.present,
            "health": self.health.value,
            "reason": self.reason,
        }


class NodeWatcher(Protocol):
    """What reports node and device changes to a driver: this machine's
    :class:`DeviceWatcher`, or a Ray cluster's node inventory
    (:class:`hetsched.ray.service.RayNodes`). It calls ``sink`` (set by the driver) from its
    own thread with core events (NodeAdded, NodeRemoved, DeviceAdded, DeviceHealthChanged)."""

    sink: Callable[[list[Event]], None] | None

    def stop(self) -> None: ...

    def view(self) -> Sequence[DeviceState]:
        """Every device seen, present or not (safe from any thread)."""
        ...


def _why_unhealthy(device: FoundDevice) -> str:
    details = []
    if "xid" in device.attributes:
        details.append(f"XID {device.attributes['xid']}")
    if int(device.attributes.get("ecc_uncorrected", 0) or 0) > 0:
        details.append(f"{device.attributes['ecc_uncorrected']} uncorrected ECC errors")
    if "error" in str(device.attributes.get("fpga_state", "")):
        details.append(f"FPGA {device.attributes['fpga_state']}")
    return "unhealthy" + (": " + ", ".join(details) if details else "")


@dataclass
class DeviceWatcher:
    node: str
    backends: Sequence[Backend]
    interval_s: float = 2.0
    #: receives the events of each poll that found a change (from the watcher's thread)
    sink: Callable[[list[Event]], None] | None = None
    #: key -> id of every device ever seen (ids are never reused)
    ids: dict[str, str] = field(default_factory=dict)
    #: key -> the device as last found, for devices present now
    present: dict[str, Device] = field(default_factory=dict)
    #: key -> state of every device ever seen
    states: dict[str, DeviceState] = field(default_factory=dict)
    #: key -> the device as last found, present or not, in the order first seen
    known: dict[str, Device] = field(default_factory=dict)
    #: events produced so far (all polls)
    changes: int = 0
    _answers: dict[str, list[FoundDevice]] = field(default_factory=dict)
    #: backend -> its last failure, as logged (a failure is logged when it changes)
    _failures: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def create(
        cls,
        node: str,
        names: Sequence[str],
        sysfs_root: str | Path = "/sys",
        fake_file: str | Path | None = None,
        interval_s: float = 2.0,
        nvml: Any = None,
    ) -> DeviceWatcher:
        context = DiscoveryContext(
            Path(sysfs_root), fake_file=Path(fake_file) if fake_file else None, nvml=nvml
        )
        return cls(node, [create(name, context) for name in names], interval_s)

    # -- discovery ---------------------------------------------------------------------

    def scan(self) -> list[FoundDevice]:
        """What the backends find now, merged; a backend that raises answers what it
        answered last (safe from one thread at a time)."""
        answers = []
        for backend in self.backends:
            try:
                answer = backend.discover()
            except Exception as exc:
                # said once per different failure, not at every poll
                said = " ".join(str(exc).split())
                if self._failures.get(backend.name) != said:
                    log.warning(
                        "%s: discovery failed (%s); keeping its last answer", backend.name, said
                    )
                    self._failures[backend.name] = said
                answer = self._answers.get(backend.name, [])
            else:
                if self._failures.pop(backend.name, None) is not None:
                    log.warning("%s: discovery works again", backend.name)
            self._answers[backend.name] = answer
            answers.append((backend, answer))
        return merge(answers)

    def initial(self, cpu_milli: int | None = None, memory_mib: int | None = None) -> Node:
        """The first discovery: this machine as a node. Later polls report changes to it."""
        found = self.scan()
        node = node_from(self.node, found, cpu_milli, memory_mib)
        by_key = assign_ids(self.node, found)
        with self._lock:
            for key, device in by_key.items():
                self.ids[key] = device.id
                self.present[key] = device
                self.known[key] = device
                self.states[key] = self._state(key, device, True, "")
        return node

    def poll(self) -> list[Event]:
        """One discovery round: the events for what changed since the last one."""
        found = self.scan()
        by_key = assign_ids(self.node, found, self.ids)
        reasons = {d.key: _why_unhealthy(d) for d in found}
        events: list[Event] = []
        with self._lock:
            for key, device in by_key.items():
                before = self.present.get(key)
                if before is None:
                    events.append(DeviceAdded(self.node, device))
                    self.ids[key] = device.id
                    reason = "" if device.health is Health.HEALTHY else reasons[key]
                    log.info("device %s (%s) appeared, %s", device.id, key, device.health.value)
                elif before.health is not device.health:
                    reason = reasons[key] if device.health is Health.UNHEALTHY else "healthy again"
                    events.append(DeviceHealthChanged(device.id, device.health, reason))
                    log.info("device %s (%s) is %s", device.id, key, reason)
                else:
                    reason = self.states[key].reason
                self.present[key] = device
                self.known[key] = device
                self.states[key] = self._changed(key, self._state(key, device, True, reason))
            for key in [k for k in self.present if k not in by_key]:
                device = self.present.pop(key)
                events.append(DeviceHealthChanged(device.id, Health.UNHEALTHY, "removed"))
                log.info("device %s (%s) was removed", device.id, key)
                state = self._state(key, device, False, "removed", Health.UNHEALTHY)
                self.states[key] = self._changed(key, state)
            self.changes += len(events)
        return events

    def _changed(self, key: str, state: DeviceState) -> DeviceState:
        """``state`` with the time it came to be: now when it differs from the last one."""
        before = self.states.get(key)
        same = before is not None and (before.present, before.health, before.reason) == (
            state.present,
            state.health,
            state.reason,
        )
        return replace(state, since=before.since if same and before else time.time())

    @staticmethod
    def _state(
        key: str, device: Device, present: bool, reason: str, health: Health | None = None
    ) -> DeviceState:
        return DeviceState(
            device.id,
            key,
            device.device_class,
            device.vendor,
            device.model,
            present,
            health or device.health,
            reason,
        )

    def current(self, base: Node) -> Node:
        """``base`` (the node :meth:`initial` returned) with every device seen so far, those
        not present now unhealthy: what a core rebuilt from scratch must start from."""
        with self._lock:
            devices = tuple(
                d if key in self.present else replace(d, health=Health.UNHEALTHY)
                for key, d in self.known.items()
            )
        return replace(base, devices=devices)

    def view(self) -> list[DeviceState]:
        """Every device seen, present or not, by id (safe from any thread)."""
        with self._lock:
            return sorted(self.states.values(), key=lambda s: s.id)

    def utilization(self) -> dict[str, float]:
        """Device id -> busy share 0..1, for the present devices whose backend measures it
        (``nvidia``, through NVML); read from the devices at each call (safe from any
        thread: the backends' answers do not touch the watcher's books)."""
        out: dict[str, float] = {}
        for backend in self.backends:
            measure = getattr(backend, "utilization", None)
            if measure is None:
                continue
            try:
                measured = measure()
            except Exception as exc:
                log.debug("%s: reading utilization failed (%s)", backend.name, exc)
                continue
            with self._lock:
                for key, value in measured.items():
                    if key in self.present:
                        out[self.ids[key]] = float(value)
        return out

    # -- the watching thread -------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="hetsched-devices", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        monitor = self._udev_monitor()
        while not self._stop.is_set():
            if monitor is not None:
                # a kernel event ends the wait early; the scan below sees what it was
                monitor.poll(timeout=self.interval_s)
            else:
                self._stop.wait(self.interval_s)
            if self._stop.is_set():
                return
            try:
                events = self.poll()
            except Exception:
                log.exception("device watch round failed")
                continue
            if events and self.sink is not None:
                self.sink(events)

    def _udev_monitor(self) -> Any:
        """A pyudev monitor on PCI and DRM events when pyudev is installed and the backends
        read the real sysfs; None otherwise (then polling alone)."""
        roots = {getattr(b, "context", DiscoveryContext()).sysfs_root for b in self.backends}
        if roots != {Path("/sys")}:
            return None
        try:
            import pyudev  # type: ignore[import-not-found]

            monitor = pyudev.Monitor.from_netlink(pyudev.Context())
            monitor.filter_by("pci")
            monitor.filter_by("drm")
            monitor.start()
            return monitor
        except Exception:
            return None
