"""Bodies of the inventory tests; they run inside a namespace next to a local cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from hetsched.model.device import Node
from hetsched.ray import _api
from hetsched.ray.inventory import RayInventory
from hetsched.ray.local import LocalCluster, LocalNodeSpec
from hetsched.ray.testing import ClusterInfo, kill_raylet
from hetsched.scheduler.events import DeviceHealthChanged, Event, NodeAdded, NodeRemoved


def _describe(node: Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "cpu_milli": node.cpu_milli,
        "memory_mib": node.memory_mib,
        "labels": dict(node.labels),
        "devices": [
            [d.id, d.device_class, d.vendor, d.model, d.health.value] for d in node.devices
        ],
    }


def _event(event: Event) -> list[Any]:
    match event:
        case NodeAdded(node):
            return ["added", _describe(node)]
        case NodeRemoved(name, reason):
            return ["removed", name, reason]
        case DeviceHealthChanged(device_id, health, reason):
            return ["health", device_id, health.value, reason]
    return [type(event).__name__]


def _poll_until(inventory: RayInventory, kind: str, timeout_s: float) -> tuple[list[Any], float]:
    """Poll until an event of ``kind`` comes; (all events seen, seconds it took)."""
    began = time.monotonic()
    seen: list[Any] = []
    while time.monotonic() - began < timeout_s:
        seen += [_event(e) for e in inventory.poll()]
        if any(e[0] == kind for e in seen):
            return seen, time.monotonic() - began
        time.sleep(0.2)
    raise AssertionError(f"no {kind} event in {timeout_s} s; saw {seen}")


def _replace(path: Path, text: str) -> None:
    partial = path.with_suffix(".tmp")
    partial.write_text(text)
    partial.replace(path)


def initial_nodes(cluster: ClusterInfo) -> dict[str, Any]:
    _api.connect(cluster.address)
    inventory = RayInventory()
    nodes = inventory.initial(timeout_s=90)
    return {
        "nodes": [_describe(n) for n in sorted(nodes, key=lambda n: n.name)],
        "ids": {n.name: inventory.node_id(n.name) for n in nodes},
        "expected_ids": cluster.node_ids,
    }


def changes(cluster: ClusterInfo) -> dict[str, Any]:
    """A device turns unhealthy in a node's fake file; a node joins (Ray's logical GPUs);
    its raylet is killed."""
    _api.connect(cluster.address)
    inventory = RayInventory(refresh_s=0.5)
    inventory.initial(timeout_s=90)
    out: dict[str, Any] = {}
    devices = Path(cluster.workdir) / "devices-a100-0.yaml"
    original = devices.read_text()
    groups = json.loads(original)["devices"]
    groups = [{**groups[0], "count": 1}, {**groups[0], "count": 1, "health": "unhealthy"}]
    # replaced in one rename: a probe that read a half-written file would see no device
    _replace(devices, json.dumps({"devices": groups}))
    try:
        out["health"], _ = _poll_until(inventory, "health", 60)
    finally:
        # the cluster is shared with other tests
        _replace(devices, original)
    extra = LocalCluster([LocalNodeSpec("h100-0", "H100", 1)], join=cluster.address)
    extra.start()
    try:
        out["joined"], _ = _poll_until(inventory, "added", 60)
        out["h100_id"] = inventory.node_id("h100-0")
        out["expected_h100_id"] = extra.node_ids["h100-0"]
        kill_raylet(ClusterInfo(cluster.address, {}, extra.pids(), "", ""), "h100-0")
        out["died"], out["seconds_to_removed"] = _poll_until(inventory, "removed", 90)
        out["h100_id_after"] = inventory.node_id("h100-0")
        out["names_after"] = sorted(n.name for n in inventory.nodes())
    finally:
        extra.stop()
    return out
