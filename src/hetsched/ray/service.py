"""``hetsched up --executor ray``: what the service runs with on a Ray cluster.

:func:`open_cluster` connects this process to a Ray cluster as a driver and returns a
:class:`RayBackend`: the cluster's nodes (:class:`~hetsched.ray.inventory.RayInventory`, as
the reconcile loop's node watcher, :class:`RayNodes`) and the task executor
(:class:`~hetsched.ray.executor.RayExecutor`, with the local executor's surface). The
service's loop, launcher and recovery drive them exactly as they drive this machine's
device watcher and process executor; nothing else in the service knows about Ray.

Contracts:
- The address is checked (``HOST:PORT``) and the GCS port must accept a TCP connection
  within ``connect_timeout_s`` before Ray is asked to connect: ``ray.init`` to an address
  where nothing listens retries for minutes.
- :meth:`RayNodes.current` is the cluster as the inventory knows it now, for a core built
  from scratch (at start, and after a failed turn); nodes that join or leave later come to
  the loop as ``NodeAdded`` / ``NodeRemoved`` events through ``sink``, and to ``on_joined``
  (the submission check's view of the cluster).
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetsched.agent.watcher import DeviceState
from hetsched.model.device import Node
from hetsched.ray import _api
from hetsched.ray.executor import RayExecutor
from hetsched.ray.inventory import RayInventory
from hetsched.scheduler.events import Event, NodeAdded

__all__ = ["RayBackend", "RayConnectError", "RayNodes", "open_cluster", "parse_address"]

log = logging.getLogger(__name__)

_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")


class RayConnectError(RuntimeError):
    """The Ray cluster cannot be reached (the message names the address and why)."""


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:6379`` for IPv6) as (host, port); ValueError says what is
    wrong."""
    host, sep, port_text = address.strip().rpartition(":")
    if not sep or not host or not _HOST.fullmatch(host):
        raise ValueError(f"--ray-address: expected HOST:PORT (the head's GCS), got {address!r}")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"--ray-address: the port must be 1..65535, got {port_text!r}")
    return host.strip("[]"), int(port_text)


@dataclass
class RayNodes:
    """The Ray cluster's nodes as the reconcile loop's node watcher."""

    inventory: RayInventory
    #: the loop's inbox (set by the loop)
    sink: Callable[[list[Event]], None] | None = None
    #: told of the nodes that joined, before the loop sees them
    on_joined: Callable[[list[Node]], None] | None = None
    #: the executor's, told of the same (it creates their agents)
    agents_for: Callable[[list[str]], None] | None = None

    def start(self) -> None:
        self.inventory.start(self._emit)

    def stop(self) -> None:
        self.inventory.stop()

    def view(self) -> list[DeviceState]:
        return self.inventory.view()

    def current(self) -> list[Node]:
        """The nodes in the cluster now, their devices as last discovered."""
        return self.inventory.nodes()

    def report(self, node_id: str, found: list[dict[str, Any]]) -> None:
        """A node agent's changed device answer (the executor's ``on_devices``)."""
        events = self.inventory.report(node_id, found)
        if events:
            self._emit(events)

    def _emit(self, events: list[Event]) -> None:
        joined = [e.node for e in events if isinstance(e, NodeAdded)]
        if joined and self.agents_for is not None:
            self.agents_for([n.name for n in joined])
        if joined and self.on_joined is not None:
            self.on_joined(joined)
        if self.sink is not None:
            self.sink(events)


@dataclass
class RayBackend:
    """A connected Ray cluster: its nodes and the executor that runs tasks there."""

    address: str
    nodes: RayNodes
    executor: RayExecutor
    #: the nodes whose first discovery answered while connecting
    initial: list[Node]


def open_cluster(
    address: str,
    home: Path,
    instance: str,
    kill_grace_s: float,
    discovery_timeout_s: float = 60.0,
    connect_timeout_s: float = 10.0,
    watch_interval_s: float = 2.0,
) -> RayBackend:
    """Connect to the Ray cluster at ``address`` and discover its nodes (waiting up to
    ``discovery_timeout_s`` for each schedulable node's first answer; later ones join as
    events). Raises ValueError for a malformed address, RayConnectError when the cluster
    cannot be reached or Ray is not installed."""
    host, port = parse_address(address)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise RayConnectError(
            "--executor ray needs Ray: pip install 'hetsched[ray]' (here and on every node)"
        ) from None
    try:
        with socket.create_connection((host, port), timeout=connect_timeout_s):
            pass
    except OSError as exc:
        raise RayConnectError(
            f"--ray-address {address}: no Ray head answers there ({exc.strerror or exc})"
        ) from None
    try:
        _api.connect(address)
    except Exception as exc:
        raise RayConnectError(f"--ray-address {address}: Ray would not connect: {exc}") from exc
    inventory = RayInventory()
    nodes = inventory.initial(timeout_s=discovery_timeout_s)
    if not nodes:
        log.warning(
            "the Ray cluster at %s offers no schedulable node yet: submissions are refused "
            "as unsatisfiable until nodes join",
            address,
        )
    executor = RayExecutor(
        home,
        instance,
        inventory.node_id,
        kill_grace_s=kill_grace_s,
        discovery_of=inventory.discovery,
        watch_interval_s=watch_interval_s,
    )
    watcher = RayNodes(inventory, agents_for=executor.joined)
    # each node's agent watches its devices and reports what changes
    executor.on_devices = watcher.report
    # each node's agent is created now (or found, after a restart), not at its first task
    executor.joined(n.name for n in nodes)
    executor.poll()
    return RayBackend(address, watcher, executor, nodes)
