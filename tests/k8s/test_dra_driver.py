"""The DRA driver against a test kubelet built from the OFFICIAL kubelet protos (real gRPC
on real unix sockets) and the API server double (real HTTP, resource.k8s.io/v1 objects
checked against the official schemas).

Devices come from the ``fake`` backend's file, which the tests edit to unplug a device or
make one unhealthy; the driver's device watcher polls it every 20 ms. ResourceClaims are
allocated here the way a scheduler does it: the claim is created, then its
``status.allocation`` and ``status.reservedFor`` are written through the status subresource.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from hetsched.agent.watcher import DeviceWatcher
from hetsched.k8s.api import KubeClusterAPI, for_host
from hetsched.k8s.dra.api import dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from hetsched.k8s.dra.driver import DraDriver, DriverSettings
from hetsched.k8s.dra.service import HealthTiming
from k8s.apiserver import ApiServer, node_json
from k8s.cdiruntime import CdiRuntime, Container
from k8s.dprig import write_devices
from k8s.drakubelet import WAIT_S, DraKubelet, Prepared

DRIVER = "hetsched.io"
NODE = "n1"
DEVICES = """devices:
  - {class: gpu, vendor: nvidia, model: A100, count: 2,
     attributes: {memory_gib: 80, numa: 0, nvlink_domain: 0}}
  - {class: fpga, vendor: xilinx, model: U250, count: 1}
"""
RESOURCE = "/apis/resource.k8s.io/v1"


@dataclass
class Rig:
    dir: Path
    devices: Path
    server: ApiServer
    api: KubeClusterAPI
    settings: DriverSettings
    driver: DraDriver
    kubelet: DraKubelet

    def restart(self) -> None:
        """The driver process ends and a new one starts on the same directories."""
        self.driver.stop()
        self.driver = start_driver(self.settings, self.devices, self.api, self.driver.clock)

    def slices(self) -> list[dict[str, Any]]:
        return self.server.store.items("resourceslices", None)

    def claim(self, name: str, results: list[dict[str, Any]], **extra: Any) -> str:
        """A claim allocated as a scheduler allocates it; its uid is returned."""
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "gpu.hetsched.io"}},
                        {"name": "fpga", "exactly": {"deviceClassName": "fpga.hetsched.io"}},
                    ],
                    **extra.get("spec", {}),
                }
            },
        }
        created = self.api.resource.create_namespaced_resource_claim(
            "default", body, _preload_content=False
        )
        claim = json.loads(created.data)
        if results:
            claim["status"] = {
                "allocation": {
                    "devices": {"results": results, **extra.get("allocation", {})},
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [NODE]}
                                ]
                            }
                        ]
                    },
                },
                "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": "pod-uid"}],
            }
            assert self.api.replace_resource_claim_status("default", name, claim) is not None
        return str(claim["metadata"]["uid"])


def result(device: str, request: str = "gpu", pool: str = NODE) -> dict[str, str]:
    return {"request": request, "driver": DRIVER, "pool": pool, "device": device}


def start_driver(
    settings: DriverSettings,
    devices: Path,
    api: KubeClusterAPI,
    clock: Callable[[], float] = time.time,
) -> DraDriver:
    watcher = DeviceWatcher.create(NODE, ["fake"], fake_file=devices, interval_s=0.02)
    driver = DraDriver(settings, watcher, api, clock=clock)
    driver.start()
    return driver


@contextlib.contextmanager
def running_rig(
    short_dir: Path,
    devices_text: str = DEVICES,
    health: HealthTiming | None = None,
    clock: Callable[[], float] = time.time,
) -> Iterator[Rig]:
    """A driver on the fake devices ``devices_text``, registered with the test kubelet;
    ``health`` and ``clock`` for its health stream."""
    devices = short_dir / "devices.yaml"
    devices.write_text(devices_text)
    dev = short_dir / "dev"
    dev.mkdir()
    (dev / "nvidiactl").touch()
    registry = short_dir / "registry"
    registry.mkdir()
    kubelet = DraKubelet(registry)  # first: skips without the official protos
    server = ApiServer().start()
    api = for_host(server.url)
    api.core.create_node(node_json(NODE))
    settings = DriverSettings(
        node_name=NODE,
        plugins_dir=short_dir / "plugins",
        registry_dir=registry,
        cdi_dir=short_dir / "cdi",
        socket_check_interval_s=0.05,
        slice_resync_s=0.2,
        roots=_roots(short_dir, dev),
        health=health or HealthTiming(),
    )
    driver = start_driver(settings, devices, api, clock)
    rig = Rig(short_dir, devices, server, api, settings, driver, kubelet)
    try:
        kubelet.register_all()
        yield rig
    finally:
        kubelet.stop()
        rig.driver.stop()
        api.close()
        server.stop()


@pytest.fixture
def rig(short_dir: Path) -> Iterator[Rig]:
    with running_rig(short_dir) as made:
        yield made


def _roots(short_dir: Path, dev: Path) -> Any:
    from hetsched.k8s.deviceplugin.allocation import Roots

    return Roots(dev=dev, sysfs=short_dir / "sys", proc=short_dir / "proc")


def _gets(rig: Rig) -> int:
    return rig.server.store.requests[("GET", "resourceclaims", "")]


# -- registration ---------------------------------------------------------------------------


def test_registers_with_the_plugin_watcher_as_a_v1_dra_plugin(rig: Rig) -> None:
    (socket,) = rig.kubelet.sockets()
    assert socket.name == "hetsched.io-reg.sock"
    plugin = rig.kubelet.plugins[DRIVER]
    assert plugin.service == "v1.DRAPlugin"
    assert plugin.versions == ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth")
    assert plugin.endpoint == str(rig.dir / "plugins" / "hetsched.io" / "dra.sock")
    assert rig.driver.registration.registered is True


def test_a_refusal_by_the_kubelet_is_kept(rig: Rig) -> None:
    (socket,) = rig.kubelet.sockets()
    assert rig.kubelet.register(socket, accept=False, why="driver name taken") is None
    assert rig.driver.registration.registered is False
    assert "driver name taken" in rig.driver.registration.error


def test_a_deleted_registration_socket_is_served_again(rig: Rig) -> None:
    rig.settings.registration_socket.unlink()
    rig.kubelet.wait_for(lambda: rig.settings.registration_socket.exists(), "the socket back")
    rig.kubelet.wait_for(lambda: bool(rig.kubelet.register_all()), "registered again")
    assert rig.kubelet.plugins[DRIVER].service == "v1.DRAPlugin"


# -- ResourceSlices ----------------------------------------------------------------------------


def test_the_node_is_published_as_one_pool(rig: Rig) -> None:
    (body,) = rig.slices()
    spec = body["spec"]
    assert (spec["driver"], spec["nodeName"]) == (DRIVER, NODE)
    assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["fpga0", "gpu0", "gpu1"]
    gpu = spec["devices"][1]
    assert gpu["attributes"] == {
        "type": {"string": "gpu"},
        "vendor": {"string": "nvidia"},
        "model": {"string": "A100"},
        "healthy": {"bool": True},
        "memory_gib": {"int": 80},
        "numa": {"int": 0},
        "nvlink_domain": {"int": 0},
    }
    assert gpu["capacity"]["share"]["value"] == "1000"
    assert gpu["capacity"]["memory"] == {"value": "80Gi"}
    assert gpu["allowMultipleAllocations"] is True  # GPUs are shareable by default
    assert "allowMultipleAllocations" not in spec["devices"][0]
    node_uid = rig.api.get_node(NODE)["metadata"]["uid"]  # type: ignore[index]
    assert body["metadata"]["ownerReferences"][0]["uid"] == node_uid


def test_health_and_hot_plug_make_new_pool_generations(rig: Rig) -> None:
    plugin = rig.kubelet.plugins[DRIVER]
    first = rig.kubelet.wait_health(DRIVER, lambda devs: len(devs) == 3, "three devices")
    assert {(d.device, d.health) for d in first} == {
        ("fpga0", "HEALTHY"),
        ("gpu0", "HEALTHY"),
        ("gpu1", "HEALTHY"),
    }
    assert {d.pool for d in first} == {NODE}
    # gpu0 and gpu1 fail
    write_devices(
        rig.devices, DEVICES.replace("nvlink_domain: 0}}", "nvlink_domain: 0}, health: unhealthy}")
    )
    sick = rig.kubelet.wait_health(
        DRIVER, lambda devs: any(d.health == "UNHEALTHY" for d in devs), "gpu0 unhealthy"
    )
    assert {d.device: d.health for d in sick}["gpu1"] == "UNHEALTHY"
    assert {d.device: d.message for d in sick}["gpu0"].startswith("unhealthy")
    rig.kubelet.wait_for(lambda: rig.slices()[0]["spec"]["pool"]["generation"] == 2, "generation 2")
    gpu0 = rig.slices()[0]["spec"]["devices"][1]
    assert gpu0["attributes"]["healthy"] == {"bool": False}
    # gpu1 is unplugged (healthy again otherwise): the slice loses it, the stream says so
    write_devices(rig.devices, DEVICES.replace("count: 2", "count: 1"))
    gone = rig.kubelet.wait_health(
        DRIVER, lambda devs: {d.device: d.message for d in devs}.get("gpu1") == "removed", "gone"
    )
    assert {d.device: d.health for d in gone} == {
        "fpga0": "HEALTHY",
        "gpu0": "HEALTHY",
        "gpu1": "UNHEALTHY",
    }
    rig.kubelet.wait_for(
        lambda: [d["name"] for d in rig.slices()[0]["spec"]["devices"]] == ["fpga0", "gpu0"],
        "gpu1 out of the slice",
    )
    assert rig.slices()[0]["spec"]["pool"]["generation"] == 3
    assert not plugin.health_ended
    # every list was complete
    assert all(len(listed) == 3 for listed in plugin.health)


def test_slices_the_kubelet_deleted_are_written_again(rig: Rig) -> None:
    (body,) = rig.slices()
    rig.api.delete_resource_slice(body["metadata"]["name"])
    rig.kubelet.wait_for(lambda: len(rig.slices()) == 1, "the slice back")
    # the devices did not change: the same generation
    assert rig.slices()[0]["spec"]["pool"]["generation"] == 1


# -- NodePrepareResources / NodeUnprepareResources -------------------------------------------------


def _spec(rig: Rig, uid: str) -> dict[str, Any]:
    path = rig.settings.cdi_dir / f"k8s.hetsched.io-claim_{uid}.json"
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _container(rig: Rig, devices: list[Prepared]) -> Container:
    """The container a runtime creates with these prepared devices' CDI ids."""
    return CdiRuntime(rig.settings.cdi_dir).inject([i for d in devices for i in d.cdi_ids])


def test_prepares_and_unprepares_a_claim_with_its_allocated_devices(rig: Rig) -> None:
    uid = rig.claim("train", [result("gpu1"), result("fpga0", request="fpga")])
    answer = rig.kubelet.prepare(DRIVER, [("default", uid, "train")])
    assert answer == {
        uid: (
            [
                Prepared(("gpu",), NODE, "gpu1", (f"k8s.hetsched.io/device={uid}-gpu1",)),
                Prepared(("fpga",), NODE, "fpga0", (f"k8s.hetsched.io/device={uid}-fpga0",)),
            ],
            "",
        )
    }
    spec = _spec(rig, uid)
    assert spec["cdiVersion"] == "0.6.0"
    assert spec["kind"] == "k8s.hetsched.io/device"
    assert [d["name"] for d in spec["devices"]] == [f"{uid}-gpu1", f"{uid}-fpga0"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia1"}]
    assert spec["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidiactl"}]
    # what a container runtime makes of it
    container = _container(rig, answer[uid][0])
    assert container.env["CUDA_VISIBLE_DEVICES"] == "1"
    ids = [d["id"] for d in json.loads(container.env["HETSCHED_DEVICES"])]
    assert ids == ["n1/gpu1", "n1/fpga0"]
    assert container.device_nodes == ["/dev/nvidiactl", "/dev/nvidia1"]
    # the kubelet asks again (a retry, or its own restart): the same answer, from the checkpoint
    gets = _gets(rig)
    assert rig.kubelet.prepare(DRIVER, [("default", uid, "train")]) == answer
    assert _gets(rig) == gets
    assert rig.kubelet.unprepare(DRIVER, [("default", uid, "train")]) == {uid: ""}
    assert not (rig.settings.cdi_dir / f"k8s.hetsched.io-claim_{uid}.json").exists()
    assert rig.driver.checkpoint is not None and rig.driver.checkpoint.claims == {}
    # unpreparing what is not prepared is a success
    assert rig.kubelet.unprepare(DRIVER, [("default", uid, "train")]) == {uid: ""}


def test_a_shared_gpu_gets_the_share_of_its_claim(rig: Rig) -> None:
    config = [
        {
            "source": "FromClass",
            "requests": ["gpu"],
            "opaque": {"driver": DRIVER, "parameters": {"share": 100}},
        },
        {
            "source": "FromClaim",
            "requests": ["gpu"],
            "opaque": {"driver": DRIVER, "parameters": {"kind": "GpuShare", "share": 300}},
        },
    ]
    uid = rig.claim("infer", [result("gpu0")], allocation={"config": config})
    (devices, error) = rig.kubelet.prepare(DRIVER, [("default", uid, "infer")])[uid]
    assert error == ""
    env = _container(rig, devices).env
    assert env["HETSCHED_DEVICE_SHARE"] == "300"  # the claim's config over the class's
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert [d.device for d in devices] == ["gpu0"]


def test_only_this_nodes_allocated_devices_are_prepared(rig: Rig) -> None:
    good = rig.claim("good", [result("gpu0")])
    elsewhere = rig.claim("elsewhere", [result("gpu0", pool="n2")])
    unknown = rig.claim("unknown", [result("gpu7")])
    pending = rig.claim("pending", [])
    write_devices(
        rig.devices, DEVICES.replace("U250, count: 1}", "U250, count: 1, health: unhealthy}")
    )
    rig.kubelet.wait_health(
        DRIVER, lambda devs: {d.device: d.health for d in devs}["fpga0"] == "UNHEALTHY", "sick"
    )
    sick = rig.claim("sick", [result("fpga0", request="fpga")])
    answer = rig.kubelet.prepare(
        DRIVER,
        [
            ("default", good, "good"),
            ("default", elsewhere, "elsewhere"),
            ("default", unknown, "unknown"),
            ("default", pending, "pending"),
            ("default", sick, "sick"),
            ("default", "0000-recreated", "good"),
            ("default", "1111", "missing"),
        ],
    )
    errors = {uid: error for uid, (_, error) in answer.items()}
    assert errors[good] == ""
    assert "device gpu0 of pool n2 is not a device of node n1" in errors[elsewhere]
    assert "device gpu7 of pool n1 is not a device of node n1" in errors[unknown]
    assert "is not allocated" in errors[pending]
    assert "device fpga0 is unhealthy" in errors[sick]
    assert "not 0000-recreated: it was recreated" in errors["0000-recreated"]
    assert "claim default/missing does not exist" in errors["1111"]
    # nothing was written for the refused claims
    assert sorted(p.name for p in rig.settings.cdi_dir.iterdir()) == [
        f"k8s.hetsched.io-claim_{good}.json"
    ]


def test_prepared_claims_survive_the_drivers_restart(rig: Rig) -> None:
    uid = rig.claim("train", [result("gpu1")])
    answer = rig.kubelet.prepare(DRIVER, [("default", uid, "train")])
    assert answer[uid][1] == ""
    rig.restart()
    # the kubelet's plugin watcher finds the new socket and registers the driver again
    rig.kubelet.wait_for(lambda: bool(rig.kubelet.register_all()), "registered again")
    # the claim is gone from the API server and its CDI spec from the disk: the driver still
    # knows what it prepared
    rig.api.resource.delete_namespaced_resource_claim("train", "default", _preload_content=False)
    (rig.settings.cdi_dir / f"k8s.hetsched.io-claim_{uid}.json").unlink()
    assert rig.kubelet.prepare(DRIVER, [("default", uid, "train")]) == answer
    assert _spec(rig, uid)["devices"][0]["name"] == f"{uid}-gpu1"
    assert rig.kubelet.unprepare(DRIVER, [("default", uid, "train")]) == {uid: ""}
    # a new pool generation after the restart: never the one before it
    rig.kubelet.wait_for(
        lambda: rig.slices()[0]["spec"]["pool"]["generation"] == 2, "a new generation"
    )


def test_the_v1beta1_service_answers_as_well(rig: Rig) -> None:
    uid = rig.claim("old", [result("gpu0")])
    with grpc.insecure_channel(f"unix://{rig.settings.socket}") as channel:
        stub = dra_v1beta1_pb2_grpc.DRAPluginStub(channel)
        request = dra_v1beta1_pb2.NodePrepareResourcesRequest(
            claims=[dra_v1beta1_pb2.Claim(namespace="default", uid=uid, name="old")]
        )
        answer = stub.NodePrepareResources(request, timeout=WAIT_S)
    (device,) = answer.claims[uid].devices
    assert (device.pool_name, device.device_name) == (NODE, "gpu0")
    assert list(device.cdi_device_ids) == [f"k8s.hetsched.io/device={uid}-gpu0"]
