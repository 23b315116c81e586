"""The extender over real HTTP on 127.0.0.1, fed requests shaped exactly like
kube-scheduler's (tests/k8s/fixtures/*.json: capitalized keys, ``null`` for the unused
``Nodes``/``NodeNames``, pods and nodes without ``kind``), with its node cache watching the
API server double.

Cluster: ``gpu-a`` (2 free A100s), ``gpu-b`` (1 A100, held by the bound pod ``hog`` of
another scheduler), ``cpu-only`` (no devices, running ``web``).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from hetsched.k8s.api import KubeClusterAPI, for_host
from hetsched.k8s.extender import MAX_PRIORITY, create_app
from hetsched.k8s.scheduler import PodScheduler
from k8s.apiserver import ApiServer, pod_json

FIXTURES = Path(__file__).parent / "fixtures"
HOG_UID = "0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f6a"
WEB_UID = "11111111-2222-4333-8444-555555555555"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # running on a thread
        pass


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    srv = ApiServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def cluster(apiserver: ApiServer) -> PodScheduler:
    api: KubeClusterAPI = for_host(apiserver.url)
    for node in fixture("nodes.json")["items"]:
        api.core.create_node(node)
    hog = pod_json("hog", devices={"gpu": 1}, scheduler="default-scheduler")
    hog["metadata"]["uid"] = HOG_UID
    hog["spec"]["nodeName"] = "gpu-b"
    web = pod_json("web", cpu="4", scheduler="default-scheduler")
    web["metadata"]["uid"] = WEB_UID
    web["spec"]["nodeName"] = "cpu-only"
    shared = pod_json("shared", devices={"gpu": 1}, annotations={"hetsched.io/share": "250"})
    shared["metadata"]["uid"] = fixture("bind.json")["PodUID"]
    shared["spec"]["schedulerName"] = "default-scheduler"
    for pod in (hog, web, shared):
        api.core.create_namespaced_pod("default", pod)
    # a cache under a scheduler name no pod uses: it only watches and accounts
    cache = PodScheduler(api, scheduler_name="hetsched-extender-cache", watch_timeout_s=2)
    cache.sync()
    return cache


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error")
    server = _Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        thread.join(0.02)
    assert server.started
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(5)


@pytest.fixture
def url(cluster: PodScheduler) -> Iterator[str]:
    with serve(create_app(cache=cluster)) as base:
        yield base


def post(url: str, verb: str, body: Any) -> Any:
    response = httpx.post(f"{url}/{verb}", json=body, timeout=5)
    assert response.status_code == 200  # any other status is an error to kube-scheduler
    return response.json()


def test_filter_cache_capable(url: str) -> None:
    got = post(url, "filter", fixture("filter-cache-capable.json"))
    assert set(got) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert got["Nodes"] is None  # cache-capable: names only
    assert got["NodeNames"] == ["gpu-a"]
    assert got["Error"] == ""
    # gpu-b has the GPU kind but it is taken: preemption could help
    assert list(got["FailedNodes"]) == ["gpu-b"]
    assert "gpu" in got["FailedNodes"]["gpu-b"]
    # cpu-only has no GPU at all: preemption cannot help
    assert list(got["FailedAndUnresolvableNodes"]) == ["cpu-only"]
    assert got["FailedAndUnresolvableNodes"]["cpu-only"].startswith("fit: ")


def test_filter_not_cache_capable_answers_nodes(url: str) -> None:
    request = fixture("filter-nodes.json")
    got = post(url, "filter", request)
    assert got["NodeNames"] is None
    assert [n["metadata"]["name"] for n in got["Nodes"]["items"]] == ["gpu-a"]
    assert got["Nodes"]["items"][0] == request["Nodes"]["items"][0]  # returned as sent
    assert list(got["FailedAndUnresolvableNodes"]) == ["cpu-only"]


def test_filter_answers_a_subset_of_its_input(url: str) -> None:
    request = fixture("filter-cache-capable.json")
    request["NodeNames"] = ["gpu-a", "no-such-node"]
    got = post(url, "filter", request)
    assert set(got["NodeNames"]) <= set(request["NodeNames"])
    assert got["FailedAndUnresolvableNodes"] == {
        "no-such-node": "hetsched: node unknown to hetsched"
    }


def test_filter_of_an_unreadable_pod_sets_error(url: str) -> None:
    request = fixture("filter-cache-capable.json")
    request["Pod"]["metadata"]["annotations"] = {"hetsched.io/share": "many"}
    got = post(url, "filter", request)
    assert "must be an integer" in got["Error"]


def test_prioritize_scores_in_range_and_prefers_feasible_nodes(url: str) -> None:
    got = post(url, "prioritize", fixture("prioritize-cache-capable.json"))
    assert [h["Host"] for h in got] == ["gpu-a", "gpu-b"]
    assert all(set(h) == {"Host", "Score"} for h in got)
    assert all(0 <= h["Score"] <= MAX_PRIORITY for h in got)
    scores = {h["Host"]: h["Score"] for h in got}
    assert scores["gpu-a"] > scores["gpu-b"]


def test_bind_assigns_devices_then_posts_the_binding(
    url: str, apiserver: ApiServer, cluster: PodScheduler
) -> None:
    got = post(url, "bind", fixture("bind.json"))
    assert got == {"Error": ""}
    pod = apiserver.store.get("pods", "default", "shared")
    assert pod is not None
    assert pod["spec"]["nodeName"] == "gpu-a"
    annotations = pod["metadata"]["annotations"]
    assert annotations["hetsched.io/assign-phase"] == "allocating"
    (device,) = json.loads(annotations["hetsched.io/assigned-devices"])
    assert device["share"] == 250
    assert device["id"].startswith("gpu-a-")
    # assumed at once: the share is taken in the extender's state
    assert cluster.core.state.free_share(device["id"]) == 750
    # a second bind of the same pod: the API server answers 409, reported as an Error
    again = post(url, "bind", fixture("bind.json"))
    assert "already bound" in again["Error"]


def test_preempt_keeps_only_nodes_where_eviction_frees_the_devices(url: str) -> None:
    got = post(url, "preempt", fixture("preempt-cache-capable.json"))
    assert got == {
        "NodeNameToMetaVictims": {
            "gpu-b": {"Pods": [{"UID": HOG_UID}], "NumPDBViolations": 0},
        }
    }


def test_stateless_mode_checks_the_nodes_it_is_sent() -> None:
    with serve(create_app()) as base:
        got = post(base, "filter", fixture("filter-nodes.json"))
        bind = post(base, "bind", fixture("bind.json"))
    assert [n["metadata"]["name"] for n in got["Nodes"]["items"]] == ["gpu-a"]
    assert "cpu-only" in got["FailedAndUnresolvableNodes"]
    assert "needs a connection" in bind["Error"]


def test_the_cli_command_serves_the_webhook() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        str(Path(sys.executable).parent / "hetsched"),
        "k8s",
        "extender",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--no-watch",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        got = None
        for _ in range(200):
            try:
                got = post(f"http://127.0.0.1:{port}", "filter", fixture("filter-nodes.json"))
                break
            except httpx.TransportError:
                if process.poll() is not None:
                    break
                threading.Event().wait(0.05)
        assert got is not None, "the extender did not start"
        assert [n["metadata"]["name"] for n in got["Nodes"]["items"]] == ["gpu-a"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)
