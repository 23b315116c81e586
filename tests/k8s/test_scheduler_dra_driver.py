"""End to end without a cluster: hetsched's DRA driver publishes a node's devices, the
hetsched scheduler allocates a pod's claim from them and binds the pod, and a test kubelet
built from the OFFICIAL kubelet protos prepares the claim through the driver, which hands
out exactly the devices the scheduler allocated."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hetsched.agent.watcher import DeviceWatcher
from hetsched.k8s.api import KubeClusterAPI, for_host
from hetsched.k8s.deviceplugin.allocation import Roots
from hetsched.k8s.dra.driver import DraDriver, DriverSettings
from hetsched.k8s.scheduler import PodScheduler
from k8s.apiserver import ApiServer, node_json
from k8s.drakubelet import DraKubelet
from k8s.stepping import wait
from k8s.test_scheduler_dra import ROOT, cel, claim_body, dra_pod, exactly, node_of, results

NODE = "n1"
DEVICES = """devices:
  - {class: gpu, vendor: nvidia, model: T4, count: 1, attributes: {memory_gib: 16, numa: 0}}
  - {class: gpu, vendor: nvidia, model: A100, count: 2, attributes: {memory_gib: 80, numa: 1}}
"""


@pytest.fixture
def cluster(short_dir: Path) -> Iterator[tuple[ApiServer, KubeClusterAPI, DraKubelet]]:
    import yaml

    (short_dir / "devices.yaml").write_text(DEVICES)
    (short_dir / "dev").mkdir()
    registry = short_dir / "registry"
    registry.mkdir()
    server = ApiServer().start()
    api = for_host(server.url)
    for body in yaml.safe_load_all((ROOT / "deploy/kubernetes/dra/deviceclasses.yaml").read_text()):
        api.resource.create_device_class(body, _preload_content=False).data  # noqa: B018
    api.core.create_node(node_json(NODE))
    settings = DriverSettings(
        node_name=NODE,
        plugins_dir=short_dir / "plugins",
        registry_dir=registry,
        cdi_dir=short_dir / "cdi",
        socket_check_interval_s=0.05,
        slice_resync_s=0.2,
        roots=Roots(dev=short_dir / "dev", sysfs=short_dir / "sys", proc=short_dir / "proc"),
    )
    watcher = DeviceWatcher.create(
        NODE, ["fake"], fake_file=short_dir / "devices.yaml", interval_s=0.02
    )
    driver = DraDriver(settings, watcher, api)
    driver.start()
    kubelet = DraKubelet(registry)
    try:
        kubelet.register_all()
        kubelet.wait_for(lambda: bool(server.store.items("resourceslices", None)), "slices")
        yield server, api, kubelet
    finally:
        kubelet.stop()
        driver.stop()
        api.close()
        server.stop()


def test_the_driver_prepares_the_devices_the_scheduler_allocated(
    cluster: tuple[ApiServer, KubeClusterAPI, DraKubelet],
) -> None:
    server, api, kubelet = cluster
    selector = 'device.attributes["hetsched.io"].model == "A100"'
    body = claim_body("train", [exactly("gpus", count=2, selectors=cel(selector))])
    api.resource.create_namespaced_resource_claim("default", body, _preload_content=False)
    sched = PodScheduler(api, watch_timeout_s=2)
    sched.sync()
    sched.start_watches()
    try:
        api.core.create_namespaced_pod("default", dra_pod("p", {"gpus": "train"}))
        wait(sched, lambda: node_of(server, "p") == NODE)
    finally:
        sched.stop()
    allocated = results(server, "train")
    assert sorted(r["device"] for r in allocated) == ["gpu1", "gpu2"]  # the two A100s
    claim: dict[str, Any] = server.store.get("resourceclaims", "default", "train") or {}
    uid = claim["metadata"]["uid"]
    prepared = kubelet.prepare("hetsched.io", [("default", uid, "train")])
    devices, error = prepared[uid]
    assert error == ""
    assert sorted((d.pool, d.device, d.requests) for d in devices) == [
        (NODE, "gpu1", ("gpus",)),
        (NODE, "gpu2", ("gpus",)),
    ]
    assert all(d.cdi_ids for d in devices)
