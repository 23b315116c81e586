"""The end-to-end story of docs/kubernetes.md, run: the chart's DeviceClasses, a DRA driver
per node, the scheduler, a kubelet from the official protos and a CDI runtime stand-in,
against the API server double. The story's input is the YAML block the docs show a user
typing; each output block of the docs must be what this run produces (normalized: made-up
names and times left out). ``HETSCHED_STORY_WRITE=1`` rewrites the output blocks."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetsched.agent.watcher import DeviceWatcher
from hetsched.k8s.api import KubeClusterAPI, for_host
from hetsched.k8s.deviceplugin.allocation import Roots
from hetsched.k8s.dra.driver import DraDriver, DriverSettings
from hetsched.k8s.scheduler import PodScheduler
from k8s.apiserver import ApiServer, node_json
from k8s.cdiruntime import CdiRuntime
from k8s.drakubelet import DraKubelet
from k8s.stepping import wait
from k8s.test_manifests import CHART, chart_documents

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "kubernetes.md"
DRIVER = "hetsched.io"
NODES = {
    "node-a": "devices:\n  - {class: gpu, vendor: nvidia, model: A100, count: 4,"
    " attributes: {memory_gib: 80, numa: 0}}\n",
    "node-b": "devices:\n  - {class: gpu, vendor: nvidia, model: T4, count: 3,"
    " attributes: {memory_gib: 16, numa: 0}}\n",
}
_BLOCK = re.compile(r"<!-- story:(\w+) -->\n```yaml\n(.*?)```\n", re.S)
Obj = dict[str, Any]


def blocks(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in _BLOCK.finditer(text)}


@contextlib.contextmanager
def drivers(folder: Path, api: KubeClusterAPI) -> Iterator[dict[str, tuple[DraDriver, DraKubelet]]]:
    """The DRA driver of each node, registered with that node's kubelet."""
    made: dict[str, tuple[DraDriver, DraKubelet]] = {}
    try:
        for node, devices in NODES.items():
            home = folder / node
            (home / "registry").mkdir(parents=True)
            (home / "devices.yaml").write_text(devices)
            kubelet = DraKubelet(home / "registry")
            settings = DriverSettings(
                node_name=node,
                plugins_dir=home / "plugins",
                registry_dir=home / "registry",
                cdi_dir=home / "cdi",
                roots=Roots(dev=home / "dev", sysfs=home / "sys", proc=home / "proc"),
            )
            watcher = DeviceWatcher.create(
                node, ["fake"], fake_file=home / "devices.yaml", interval_s=0.05
            )
            driver = DraDriver(settings, watcher, api)
            driver.start()
            made[node] = (driver, kubelet)
            kubelet.register_all()
        yield made
    finally:
        for driver, kubelet in made.values():
            kubelet.stop()
            driver.stop()


def _create(server: ApiServer, api: KubeClusterAPI, doc: Obj) -> None:
    namespace = doc["metadata"].get("namespace", "default")
    kind = doc["kind"]
    if kind == "Pod":
        api.core.create_namespaced_pod(namespace, doc)
        server.store.create_pod_claims(namespace, doc["metadata"]["name"])  # the controller
    elif kind == "ResourceClaim":
        api.resource.create_namespaced_resource_claim(namespace, doc, _preload_content=False)
    elif kind == "ResourceClaimTemplate":
        api.resource.create_namespaced_resource_claim_template(
            namespace, doc, _preload_content=False
        )
    else:
        raise AssertionError(f"the story does not create {kind}")


def _named(name: str) -> str:
    """A claim made from a template: its random suffix shown as ``-xxxxx``."""
    return re.sub(r"-[0-9a-f]{5}$", "-xxxxx", name)


def _scrub(value: Any, uids: dict[str, str]) -> Any:
    """``value`` with uids replaced and made-up claim names normalized."""
    if isinstance(value, dict):
        return {k: _scrub(v, uids) for k, v in value.items() if k != "allocationTimestamp"}
    if isinstance(value, list):
        return [_scrub(v, uids) for v in value]
    if isinstance(value, str):
        for uid in uids:
            value = value.replace(uid, "<uid>")
        return _named(value) if re.search(r"-[0-9a-f]{5}$", value) else value
    return value


def produce(server: ApiServer, running: dict[str, tuple[DraDriver, DraKubelet]]) -> dict[str, Any]:
    """The output blocks, from the double's store and the nodes' kubelets."""
    store = server.store
    claims = sorted(store.items("resourceclaims", None), key=lambda c: c["metadata"]["name"])
    pods = sorted(store.items("pods", None), key=lambda p: p["metadata"]["name"])
    uids = {o["metadata"]["uid"]: "" for o in [*claims, *pods]}
    (slice_,) = [
        s for s in store.items("resourceslices", None) if s["spec"]["nodeName"] == "node-a"
    ]
    shown_slice = {
        "metadata": {"name": slice_["metadata"]["name"]},
        "spec": {**slice_["spec"], "devices": slice_["spec"]["devices"][:1]},
    }
    out: dict[str, Any] = {
        "slice": shown_slice,
        "claims": [
            {"name": c["metadata"]["name"], "status": c.get("status") or {}} for c in claims
        ],
        "pods": [
            {
                "name": p["metadata"]["name"],
                "nodeName": p["spec"].get("nodeName", ""),
                "annotations": {
                    k: v
                    for k, v in (p["metadata"].get("annotations") or {}).items()
                    if k.startswith("hetsched.io/")
                },
            }
            for p in pods
        ],
        "events": sorted(
            (
                {
                    "reason": e["reason"],
                    "object": e["involvedObject"]["name"],
                    "message": e.get("message") or e.get("note", ""),
                }
                for e in store.items("events", None)
            ),
            key=lambda e: (e["object"], e["reason"]),
        ),
        "containers": _containers(claims, pods, running),
    }
    return {k: _scrub(v, uids) for k, v in out.items()}


def _containers(
    claims: list[Obj], pods: list[Obj], running: dict[str, tuple[DraDriver, DraKubelet]]
) -> list[Obj]:
    """Each pod's container as the runtime makes it: prepare its claims on its node, inject
    the CDI ids of the container's claims."""
    by_name = {c["metadata"]["name"]: c for c in claims}
    out = []
    for pod in pods:
        node = pod["spec"]["nodeName"]
        driver, kubelet = running[node]
        statuses = {
            s["name"]: s["resourceClaimName"]
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        ids: list[str] = []
        for ref in pod["spec"]["resourceClaims"]:
            name = ref.get("resourceClaimName") or statuses[ref["name"]]
            uid = by_name[name]["metadata"]["uid"]
            answer = kubelet.prepare(DRIVER, [("default", uid, name)])
            devices, error = answer[uid]
            assert error == "", error
            ids += [i for d in devices for i in d.cdi_ids]
        container = CdiRuntime(driver.settings.cdi_dir).inject(ids)
        env = {k: v for k, v in sorted(container.env.items()) if k.startswith(("HETSCHED", "CUDA"))}
        out.append({"pod": pod["metadata"]["name"], "node": node, "env": env})
    return out


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, width=88, default_flow_style=False)


def test_the_story_in_the_docs_is_what_hetsched_does(short_dir: Path) -> None:
    text = DOCS.read_text()
    found = blocks(text)
    assert {"slice", "input", "claims", "pods", "events", "containers"} <= set(found)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["devicePlugin"]["enabled"] = False  # as the docs install it
    values["draDriver"]["enabled"] = True
    classes = [d for d in chart_documents(values) if d["kind"] == "DeviceClass"]
    server = ApiServer().start()
    api = for_host(server.url)
    try:
        for body in classes:
            api.resource.create_device_class(body, _preload_content=False)
        for node in NODES:
            api.core.create_node(node_json(node, cpu="32", memory="256Gi"))
        with drivers(short_dir, api) as running:
            for _, kubelet in running.values():
                kubelet.wait_for(
                    lambda: len(server.store.items("resourceslices", None)) == 2, "slices"
                )
            inputs = [d for d in yaml.safe_load_all(found["input"]) if d]
            for doc in inputs:
                _create(server, api, doc)
            sched = PodScheduler(api, watch_timeout_s=2)
            sched.sync()
            sched.start_watches()
            names = [d["metadata"]["name"] for d in inputs if d["kind"] == "Pod"]
            try:
                wait(sched, lambda: all(_bound(server, n) for n in names))
            except AssertionError:
                why = [
                    (e["involvedObject"]["name"], e["message"])
                    for e in server.store.items("events", None)
                ]
                raise AssertionError(f"not all bound: {why}") from None
            finally:
                sched.stop()
            produced = produce(server, running)
    finally:
        api.close()
        server.stop()
    if os.environ.get("HETSCHED_STORY_WRITE"):
        for name, value in produced.items():
            text = text.replace(
                f"<!-- story:{name} -->\n```yaml\n{found[name]}```\n",
                f"<!-- story:{name} -->\n```yaml\n{_dump(value)}```\n",
            )
        DOCS.write_text(text)
        pytest.skip("the story's blocks were rewritten in docs/kubernetes.md")
    for name, value in produced.items():
        assert yaml.safe_load(found[name]) == value, f"the docs' story:{name} block differs"


def _bound(server: ApiServer, name: str) -> bool:
    pod = server.store.get("pods", "default", name) or {}
    return bool(pod.get("spec", {}).get("nodeName"))
