"""Devices from the node itself, without Ray: the node agent watches its node's devices with
the discovery `hetsched up` runs (here the `fake` device file), answers a changed device
list at once through its long poll, and the control plane's inventory turns each changed
answer into the events a local device watcher gives."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from hetsched.agent.watcher import DeviceWatcher
from hetsched.model.device import Health
from hetsched.ray import _api
from hetsched.ray.agent import NodeAgent
from hetsched.ray.inventory import RayInventory
from hetsched.ray.nodedevices import NodeDevices
from hetsched.scheduler.events import DeviceAdded, DeviceHealthChanged, NodeAdded

A100S = "devices:\n  - {class: gpu, vendor: nvidia, model: A100, count: 2}\n"
ONE_A100 = "devices:\n  - {class: gpu, vendor: nvidia, model: A100, count: 1}\n"
SICK = (
    "devices:\n  - {class: gpu, vendor: nvidia, model: A100, count: 1}\n"
    "  - {class: gpu, vendor: nvidia, model: A100, health: unhealthy, attributes: {xid: 79}}\n"
)


def _write(path: Path, text: str) -> None:
    partial = path.with_suffix(".tmp")
    partial.write_text(text)
    partial.replace(path)


@pytest.fixture
def devices_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "devices.yaml"
    _write(path, A100S)
    monkeypatch.setenv("HETSCHED_FAKE_DEVICES", str(path))
    monkeypatch.delenv("HETSCHED_DISCOVERY", raising=False)
    return path


def _keys(answer: tuple[int, list[dict[str, Any]]] | None) -> list[tuple[str, str]]:
    assert answer is not None
    return [(d["key"], d["health"]) for d in answer[1]]


def test_the_agent_uses_the_local_watchers_own_scan(devices_file: Path) -> None:
    # not a copy: the node's devices are found by the local device watcher's backends
    watch = NodeDevices.create(["fake"], 0.05)
    assert isinstance(watch.watcher, DeviceWatcher)
    assert [b.name for b in watch.watcher.backends] == ["fake"]
    assert watch.since(0) is None  # nothing scanned yet
    assert watch.scan() is True and watch.scan() is False
    assert watch.since(0) == (1, watch.found) and watch.since(1) is None
    assert _keys(watch.since(0)) == [("fake:gpu0", "healthy"), ("fake:gpu1", "healthy")]
    # a half-written file keeps the last answer: no change, no device gone
    devices_file.write_text("devices: [{class: gpu")
    assert watch.scan() is False and watch.version == 1


def test_a_device_change_on_the_node_ends_the_long_poll_at_once(
    tmp_path: Path, devices_file: Path
) -> None:
    async def body() -> dict[str, Any]:
        agent = NodeAgent("t", "node-id", str(tmp_path / "node"), 0.5, ["fake"], 0.05)
        first = await agent.sync({}, [], 5.0, 1024)
        seen = first["devices"][0]
        # nothing changes: the poll waits its time and carries no devices
        quiet = await agent.sync({}, [], 0.3, 1024, seen)
        _write(devices_file, SICK)
        began = time.monotonic()
        changed = await agent.sync({}, [], 20.0, 1024, seen)
        waited = time.monotonic() - began
        _write(devices_file, ONE_A100)
        unplugged = await agent.sync({}, [], 20.0, 1024, changed["devices"][0])
        await agent.close()
        return {
            "first": first,
            "quiet": quiet,
            "changed": changed,
            "waited": waited,
            **{"unplugged": unplugged},
        }

    out = asyncio.run(body())
    assert _keys(out["first"]["devices"]) == [("fake:gpu0", "healthy"), ("fake:gpu1", "healthy")]
    assert out["quiet"]["devices"] is None
    assert out["changed"]["devices"][0] == out["first"]["devices"][0] + 1
    assert _keys(out["changed"]["devices"]) == [
        ("fake:gpu0", "healthy"),
        ("fake:gpu1", "unhealthy"),
    ]
    assert out["changed"]["devices"][1][1]["attributes"] == {"xid": 79}
    # answered on the change, not at the end of the 20 s wait
    assert out["waited"] < 20.0
    assert _keys(out["unplugged"]["devices"]) == [("fake:gpu0", "healthy")]


def test_an_agent_without_discovery_watches_nothing(tmp_path: Path) -> None:
    async def body() -> dict[str, Any]:
        agent = NodeAgent("t", "node-id", str(tmp_path / "node"), 0.5)
        reply = await agent.sync({}, [], 0.1, 1024)
        await agent.close()
        return reply

    assert asyncio.run(body())["devices"] is None


def _inventory(monkeypatch: pytest.MonkeyPatch) -> tuple[RayInventory, str]:
    """An inventory of one Ray node with two A100s (Ray's logical devices: no probe)."""
    node_id = "f" * 56
    entry = {
        "NodeID": node_id,
        "Alive": True,
        "Labels": {"hetsched.io/node": "a100-0", "hetsched.io/discovery": "ray"},
        "Resources": {
            "CPU": 4.0,
            "GPU": 2.0,
            "memory": 8.0 * (1 << 30),
            "accelerator_type:A100": 1,
        },
    }
    monkeypatch.setattr(_api, "nodes", lambda: [entry])
    inventory = RayInventory()
    (added,) = inventory.poll(now=0.0)
    assert isinstance(added, NodeAdded)
    assert [d.id for d in added.node.devices] == ["a100-0/gpu0", "a100-0/gpu1"]
    return inventory, node_id


def _found(key: str, health: str = "healthy", **attributes: Any) -> dict[str, Any]:
    return {
        "key": key,
        "class": "gpu",
        "vendor": "nvidia",
        "model": "A100",
        "health": health,
        "source": "fake",
        "attributes": attributes,
    }


def test_the_agents_answers_become_the_events_of_a_local_watcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inventory, node_id = _inventory(monkeypatch)
    assert inventory.discovery(node_id) is None  # Ray's devices: the agent watches nothing
    both = [_found("ray:gpu0"), _found("ray:gpu1")]
    assert inventory.report(node_id, both) == []  # the same devices: nothing changed
    assert inventory.report(node_id, [_found("ray:gpu0")]) == [
        DeviceHealthChanged("a100-0/gpu1", Health.UNHEALTHY, "removed")
    ]
    events = inventory.report(
        node_id, [_found("ray:gpu0", "unhealthy", xid=79), _found("ray:gpu1")]
    )
    assert events[0] == DeviceHealthChanged("a100-0/gpu0", Health.UNHEALTHY, "unhealthy: XID 79")
    # the unplugged one comes back with the id it had
    assert isinstance(events[1], DeviceAdded) and events[1].device.id == "a100-0/gpu1"
    assert len(events) == 2
    states = {s.id: (s.present, s.health, s.reason) for s in inventory.view()}
    assert states == {
        "a100-0/gpu0": (True, Health.UNHEALTHY, "unhealthy: XID 79"),
        "a100-0/gpu1": (True, Health.HEALTHY, ""),
    }
    # a node that is not (or no longer) in the cluster: its answer is dropped
    assert inventory.report("0" * 56, both) == []


def test_a_ray_head_that_stops_answering_is_said_once_and_the_nodes_are_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    inventory, node_id = _inventory(monkeypatch)
    head = {"up": False}
    entry = {
        "NodeID": node_id,
        "Alive": True,
        "Labels": {"hetsched.io/node": "a100-0", "hetsched.io/discovery": "ray"},
        "Resources": {"CPU": 4.0, "GPU": 2.0, "accelerator_type:A100": 1},
    }
    rounds = {"n": 0}

    def nodes() -> list[dict[str, Any]]:
        rounds["n"] += 1
        if not head["up"]:
            raise ConnectionError("GCS at 127.0.0.1:6379 unreachable")
        return [entry]

    monkeypatch.setattr(_api, "nodes", nodes)
    inventory.interval_s = 0.01
    events: list[Any] = []
    caplog.set_level("WARNING", logger="hetsched.ray.inventory")
    inventory.start(events.extend)
    try:
        deadline = time.monotonic() + 20
        while rounds["n"] < 10:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert inventory.failing_since is not None
        assert [n.name for n in inventory.nodes()] == ["a100-0"]  # kept, not removed
        head["up"] = True
        while inventory.failing_since is not None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        inventory.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "hetsched.ray.inventory"]
    assert len([m for m in said if "does not answer" in m]) == 1, said
    assert "GCS at 127.0.0.1:6379 unreachable" in said[0]
    assert len([m for m in said if "answers again" in m]) == 1, said
    assert events == []  # no node removed or added for the outage
