"""The DRA driver's view of this node's devices: what it publishes and prepares, and the
health it streams to the kubelet.

The device watcher (:mod:`hetsched.agent.watcher`) feeds :meth:`DeviceBook.update` with the
devices present now and the state of every device ever seen; the book keeps them by DRA
device name, with the time each device's health last changed, and a version that changes
with them, which wakes the health streams. Safe from any thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hetsched.agent.watcher import DeviceState
from hetsched.k8s.dra.devices import dra_name
from hetsched.model.device import Device, Health

__all__ = ["DeviceBook", "HealthEntry"]


@dataclass(frozen=True, slots=True)
class HealthEntry:
    """One device's health as the kubelet is told it."""

    healthy: bool
    #: why (``removed``, ``unhealthy: XID 79``); empty when healthy
    message: str
    #: Unix time in seconds when this health was first seen
    since: int


class DeviceBook:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._cond = threading.Condition()
        self._clock = clock
        self._devices: dict[str, Device] = {}
        self._health: dict[str, HealthEntry] = {}
        self._version = 0

    def update(self, present: Iterable[Device], states: Iterable[DeviceState]) -> bool:
        """Replace the devices (``present``) and their health (``states``: every device
        ever seen, a removed one unhealthy); True when anything changed."""
        devices = {dra_name(d): d for d in present}
        names = {d.id: name for name, d in devices.items()}
        now = int(self._clock())
        with self._cond:
            health: dict[str, HealthEntry] = {}
            for state in states:
                name = names.get(state.id) or dra_name(Device(state.id, state.device_class))
                healthy = state.present and state.health is Health.HEALTHY
                message = "" if healthy else (state.reason or "unhealthy")
                before = self._health.get(name)
                if before is not None and (before.healthy, before.message) == (healthy, message):
                    health[name] = before
                else:
                    health[name] = HealthEntry(healthy, message, now)
            if devices == self._devices and health == self._health:
                return False
            self._devices, self._health = devices, health
            self._version += 1
            self._cond.notify_all()
            return True

    def snapshot(self) -> tuple[int, dict[str, Device], dict[str, HealthEntry]]:
        with self._cond:
            return self._version, dict(self._devices), dict(self._health)

    def wait_change(self, version: int, timeout_s: float) -> int:
        """The current version, once it differs from ``version`` or ``timeout_s`` passed."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout=timeout_s)
            return self._version

    def wake(self) -> None:
        """Wake the waiting streams (one of them may have been cancelled)."""
        with self._cond:
            self._cond.notify_all()
