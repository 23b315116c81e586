"""The node inventory: Ray's node table and hetsched's discovery run on each node."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray_fixtures import check

from hetsched.model.device import Health
from hetsched.ray import _api
from hetsched.ray.inventory import RayInventory, logical_devices
from hetsched.ray.probe import found_from_dict, parse_backends, probe
from hetsched.ray.testing import NamespacedCluster
from hetsched.scheduler.events import NodeAdded


@pytest.mark.parametrize(
    ("resources", "labels", "expected"),
    [
        ({"CPU": 4.0}, {}, []),
        (
            {"GPU": 2.0, "accelerator_type:A100": 1.0},
            {},
            [("gpu", "nvidia", "A100"), ("gpu", "nvidia", "A100")],
        ),
        ({"GPU": 1.0}, {"hetsched.io/gpu-model": "T4"}, [("gpu", "nvidia", "T4")]),
        ({"GPU": 1.0}, {}, [("gpu", "nvidia", "")]),
        (
            {"GPU": 1.0, "accelerator_type:AMD-Instinct-MI300X-OAM": 1.0},
            {},
            [("gpu", "amd", "AMD-Instinct-MI300X-OAM")],
        ),
    ],
)
def test_ray_logical_gpus_as_devices(
    resources: dict[str, float], labels: dict[str, str], expected: list[tuple[str, str, str]]
) -> None:
    found = logical_devices(resources, labels)
    assert [(d.device_class, d.vendor, d.model) for d in found] == expected
    assert [d.key for d in found] == [f"ray:gpu{i}" for i in range(len(expected))]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu.nvidia.pci", ["cpu", "nvidia", "pci"]),
        ("fake", ["fake"]),
        ("cpu,fake", ["cpu", "fake"]),
    ],
)
def test_backend_lists(text: str, expected: list[str]) -> None:
    assert parse_backends(text) == expected


@pytest.mark.parametrize("text", ["", "cpu.tpu", "..."])
def test_bad_backend_lists_name_the_unknown(text: str) -> None:
    with pytest.raises(ValueError, match="known: cpu, fake, nvidia, pci"):
        parse_backends(text)


def test_the_probe_reads_the_fake_file_from_the_node_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = tmp_path / "devices.yaml"
    devices.write_text(
        "devices:\n  - {class: gpu, vendor: nvidia, model: A100, count: 2}\n"
        "  - {class: fpga, vendor: xilinx, model: U250, health: unhealthy}\n"
    )
    monkeypatch.setenv("HETSCHED_FAKE_DEVICES", str(devices))
    monkeypatch.setenv("HETSCHED_DISCOVERY", "fake")
    answer = probe()
    assert answer["backends"] == ["fake"]
    found = [found_from_dict(d) for d in answer["found"]]
    assert [(d.key, d.model, d.health) for d in found] == [
        ("fake:gpu0", "A100", Health.HEALTHY),
        ("fake:gpu1", "A100", Health.HEALTHY),
        ("fake:fpga0", "U250", Health.UNHEALTHY),
    ]
    assert answer["cpus"] >= 1 and answer["memory_mib"] > 0


def test_nodes_come_from_ray_with_devices_from_discovery_on_each_node(
    ray_cluster: NamespacedCluster,
) -> None:
    value = check(ray_cluster.run("ray_bodies_inventory:initial_nodes", timeout_s=120))
    assert isinstance(value, dict)
    nodes = {n["name"]: n for n in value["nodes"]}
    # the head is labelled not schedulable
    assert set(nodes) == {"a100-0", "t4-0", "cpu-0"}
    assert nodes["a100-0"]["devices"] == [
        ["a100-0/gpu0", "gpu", "nvidia", "A100", "healthy"],
        ["a100-0/gpu1", "gpu", "nvidia", "A100", "healthy"],
    ]
    assert nodes["t4-0"]["devices"] == [["t4-0/gpu0", "gpu", "nvidia", "T4", "healthy"]]
    assert nodes["cpu-0"]["devices"] == []
    for node in nodes.values():
        # Ray's logical CPUs and memory, as `hetsched ray local` gave them
        assert (node["cpu_milli"], node["memory_mib"]) == (4000, 8192)
        assert node["labels"]["hetsched.io/node"] == node["name"]
        assert node["labels"]["ray.io/node-id"] == value["expected_ids"][node["name"]]
    assert value["ids"] == value["expected_ids"]


def test_health_changes_joins_and_deaths_become_events(ray_cluster: NamespacedCluster) -> None:
    value = check(ray_cluster.run("ray_bodies_inventory:changes", timeout_s=240))
    assert isinstance(value, dict)
    assert ["health", "a100-0/gpu1", "unhealthy", "unhealthy"] in value["health"]
    added = [e for e in value["joined"] if e[0] == "added"]
    assert len(added) == 1
    node = added[0][1]
    assert node["name"] == "h100-0"
    # no fake file on that node: Ray's logical GPU, its model from accelerator_type
    assert node["devices"] == [["h100-0/gpu0", "gpu", "nvidia", "H100", "healthy"]]
    assert value["h100_id"] == value["expected_h100_id"]
    removed = [e for e in value["died"] if e[0] == "removed"]
    assert len(removed) == 1 and removed[0][1] == "h100-0"
    assert removed[0][2].startswith("Ray node died")
    assert value["h100_id_after"] is None
    assert value["names_after"] == ["a100-0", "cpu-0", "t4-0"]


@pytest.mark.parametrize(
    ("node_labels", "address"),
    [
        ({}, "10.0.0.7"),  # Ray's address for the node
        ({"hetsched.io/address": "gpu-7.example"}, "gpu-7.example"),  # the operator's
    ],
)
def test_a_ray_node_is_reached_at_its_address_in_rays_table(
    monkeypatch: pytest.MonkeyPatch, node_labels: dict[str, str], address: str
) -> None:
    entry = {
        "NodeID": "f" * 56,
        "Alive": True,
        "NodeManagerAddress": "10.0.0.7",
        "NodeManagerHostname": "gpu-7",
        "Labels": {"hetsched.io/discovery": "ray", **node_labels},
        "Resources": {"CPU": 4.0, "GPU": 1.0, "accelerator_type:A100": 1.0},
    }
    monkeypatch.setattr(_api, "nodes", lambda: [entry])
    (added,) = RayInventory().poll(now=0.0)
    assert isinstance(added, NodeAdded)
    assert added.node.name == "gpu-7"
    assert added.node.labels["hetsched.io/address"] == address
