"""The node agent's device watch: the discovery ``hetsched up`` runs on its own machine
(:class:`hetsched.agent.watcher.DeviceWatcher`'s backends and scan: NVML, PCI sysfs, the
``fake`` device file), run by the agent on its Ray node.

Contracts:
- Every ``interval_s`` a thread scans the node's devices with the backends the node's
  ``hetsched.io/discovery`` label names (else ``HETSCHED_DISCOVERY`` in the node's
  environment, else ``cpu``, ``nvidia``, ``pci``; the ``fake`` backend reads
  ``HETSCHED_FAKE_DEVICES``). A backend that raises answers what it answered last (the
  watcher's rule: a failing probe never looks like every device unplugged).
- Each answer that differs from the one before gets the next version (1 for the first);
  ``on_change`` is called (from the thread) when it does. The control plane holds the
  version it has seen and is sent the answer again only when the version differs: a
  recreated agent starts again at 1 and is heard.
- The answer is plain data (it crosses Ray's object store): each device as
  :meth:`~hetsched.agent.backends.FoundDevice.to_dict`. The control plane's inventory turns
  a changed answer into ``DeviceAdded`` / ``DeviceHealthChanged`` events with its own watcher
  of the node, as the local device watcher does (:mod:`hetsched.ray.inventory`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hetsched.agent.watcher import DeviceWatcher
from hetsched.ray.probe import backend_list, fake_file

__all__ = ["NodeDevices"]

log = logging.getLogger("hetsched.ray.agent")


@dataclass
class NodeDevices:
    watcher: DeviceWatcher
    interval_s: float
    #: called from the watch thread when the answer changed
    on_change: Callable[[], None] | None = None
    version: int = 0
    found: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @classmethod
    def create(cls, backends: Sequence[str], interval_s: float) -> NodeDevices:
        """The watch of this node with ``backends`` ([]: from the node's environment)."""
        names = backend_list(backends)
        watcher = DeviceWatcher.create("node", names, fake_file=fake_file())
        return cls(watcher, interval_s)

    def scan(self) -> bool:
        """One discovery round; whether the answer changed."""
        found = [device.to_dict() for device in self.watcher.scan()]
        with self._lock:
            if found == self.found and self.version > 0:
                return False
            self.found, self.version = found, self.version + 1
        return True

    def since(self, seen: int) -> tuple[int, list[dict[str, Any]]] | None:
        """(version, answer) when the version differs from ``seen``; None when it does not
        or nothing was scanned yet."""
        with self._lock:
            if self.version == 0 or self.version == seen:
                return None
            return self.version, list(self.found)

    def start(self, on_change: Callable[[], None]) -> None:
        """Scan now, then every ``interval_s`` in a thread."""
        self.on_change = on_change
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="hetsched-node-devices", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while True:
            try:
                changed = self.scan()
            except Exception:
                log.exception("device watch round failed")
                changed = False
            if changed and self.on_change is not None:
                self.on_change()
            if self._stop.wait(self.interval_s):
                return
