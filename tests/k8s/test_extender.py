"""The extender over real HTTP on 127.0.0.1, fed requests shaped exactly like
kube-scheduler's (tests/k8s/fixtures/*.json: capitalized keys, ``null`` for the unused
``Nodes``/``NodeNames``, pods and nodes without ``kind``), with its node cache watching the
API server double.

Cluster: ``gpu-a`` (2 free A100s), ``gpu-b`` (1 A100, held by the bound pod ``hog`` of
another scheduler), ``cpu-only`` (no devices, running ``web``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.k8s.api import ApiError, KubeClusterAPI, for_host
from hetsched.k8s.extender import MAX_PRIORITY, create_app
from hetsched.k8s.scheduler import PodScheduler
from k8s.apiserver import ApiServer, pod_json

FIXTURES = Path(__file__).parent / "fixtures"
ASSIGNED = "hetsched.io/assigned-devices"
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
    # a retried bind of the bound pod (kube-scheduler lost the first answer) succeeds and
    # changes nothing: no second Binding, the same devices, the same share held
    before = apiserver.store.get("pods", "default", "shared")
    assert post(url, "bind", fixture("bind.json")) == {"Error": ""}
    assert apiserver.store.get("pods", "default", "shared") == before
    assert [b[3] for b in apiserver.store.bindings] == [201]
    assert cluster.core.state.free_share(device["id"]) == 750
    # to another node: an error, and still nothing changes
    other = {**fixture("bind.json"), "Node": "gpu-b"}
    assert "already bound to gpu-a" in post(url, "bind", other)["Error"]
    assert apiserver.store.get("pods", "default", "shared") == before


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


# -- binds that are retried, lost or fail (no annotation without the binding) -----------------


def _shared_pod(apiserver: ApiServer) -> Any:
    pod = apiserver.store.get("pods", "default", "shared")
    assert pod is not None
    return pod


def _raw_bind(cluster: PodScheduler, node: str, annotations: dict[str, str] | None) -> None:
    """Someone binds the pod behind the extender's back (the cache has not seen it yet)."""
    api = cluster.api
    assert isinstance(api, KubeClusterAPI)
    assert api.bind("default", "shared", "", node, annotations)


def test_a_bind_lost_to_another_binder_writes_nothing_and_frees_its_choice(
    url: str, apiserver: ApiServer, cluster: PodScheduler
) -> None:
    _raw_bind(cluster, "cpu-only", None)
    got = post(url, "bind", fixture("bind.json"))
    assert "already bound to cpu-only, not gpu-a" in got["Error"]
    pod = _shared_pod(apiserver)
    assert pod["metadata"]["annotations"] == {"hetsched.io/share": "250"}  # none of ours
    state = cluster.core.state
    assert state.free_share("gpu-a-gpu0") == state.free_share("gpu-a-gpu1") == 1000


def test_a_retried_bind_whose_first_answer_was_lost_keeps_the_first_choice(
    url: str, apiserver: ApiServer, cluster: PodScheduler
) -> None:
    # the first try went through (gpu1, 250) but kube-scheduler never got the answer, and
    # the cache has not seen the pod bound yet: the retry must not assign other devices
    first = {
        "hetsched.io/assigned-devices": json.dumps(
            [{"id": "gpu-a-gpu1", "share": 250, "resource": "hetsched.io/gpu"}]
        ),
        "hetsched.io/assign-phase": "allocating",
    }
    _raw_bind(cluster, "gpu-a", first)
    assert post(url, "bind", fixture("bind.json")) == {"Error": ""}
    annotations = _shared_pod(apiserver)["metadata"]["annotations"]
    assert annotations["hetsched.io/assigned-devices"] == first["hetsched.io/assigned-devices"]
    state = cluster.core.state
    assert state.free_share("gpu-a-gpu1") == 750  # accounted where the server says
    assert state.free_share("gpu-a-gpu0") == 1000  # the retry's own choice was released
    assert [b[3] for b in apiserver.store.bindings] == [201, 409]


class _Failing:
    """The cache's API with a binding that fails (a 500, or a dropped connection)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.fail = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bind(self, *args: Any, **kwargs: Any) -> bool:
        if self.fail:
            raise ApiError(500, "etcdserver: request timed out")
        return bool(self.inner.bind(*args, **kwargs))


def test_a_bind_that_fails_leaves_no_annotation_and_no_assumption(
    url: str, apiserver: ApiServer, cluster: PodScheduler
) -> None:
    failing = _Failing(cluster.api)
    cluster.api = failing
    got = post(url, "bind", fixture("bind.json"))
    assert "etcdserver: request timed out" in got["Error"]
    pod = _shared_pod(apiserver)
    assert not pod["spec"].get("nodeName")
    assert "hetsched.io/assigned-devices" not in pod["metadata"]["annotations"]
    state = cluster.core.state
    assert state.free_share("gpu-a-gpu0") == state.free_share("gpu-a-gpu1") == 1000
    # kube-scheduler tries again once the API server is back: a normal bind
    failing.fail = False
    assert post(url, "bind", fixture("bind.json")) == {"Error": ""}
    (device,) = json.loads(_shared_pod(apiserver)["metadata"]["annotations"][ASSIGNED])
    assert state.free_share(device["id"]) == 750


class _Held:
    """The cache's API holding the first binding until a second one has been chosen."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.second = threading.Event()
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bind(self, *args: Any, **kwargs: Any) -> bool:
        self.calls += 1
        if self.calls == 1:
            self.second.wait(5)
        else:
            self.second.set()
        return bool(self.inner.bind(*args, **kwargs))


def test_concurrent_binds_never_choose_the_same_device(
    url: str, apiserver: ApiServer, cluster: PodScheduler
) -> None:
    api = cluster.api
    assert isinstance(api, KubeClusterAPI)
    for name in ("x", "y"):
        body = pod_json(name, devices={"gpu": 1}, scheduler="default-scheduler")
        api.core.create_namespaced_pod("default", body)
    cluster.sync()
    cluster.api = _Held(api)
    requests = [
        {"PodName": n, "PodNamespace": "default", "PodUID": "", "Node": "gpu-a"} for n in "xy"
    ]
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda body: post(url, "bind", body), requests))
    assert answers == [{"Error": ""}, {"Error": ""}]
    chosen = []
    for name in ("x", "y"):
        pod = apiserver.store.get("pods", "default", name)
        assert pod is not None
        chosen += [d["id"] for d in json.loads(pod["metadata"]["annotations"][ASSIGNED])]
    assert sorted(chosen) == ["gpu-a-gpu0", "gpu-a-gpu1"]


# -- malformed requests: a 4xx or an Error, never a 5xx -------------------------------------------


def test_a_nodes_item_without_a_name_is_an_error_not_a_500(url: str) -> None:
    request = fixture("filter-nodes.json")
    request["Nodes"]["items"].append({"spec": {}})
    got = post(url, "filter", request)
    assert got["Error"] == "Nodes.items[2]: metadata.name is required"
    answer = httpx.post(f"{url}/prioritize", json=request, timeout=5)
    assert answer.status_code == 400
    assert "Nodes.items[2]" in answer.json()["detail"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda n: n["status"]["allocatable"].update(cpu="lots"),
            "status.allocatable",
        ),
        (
            lambda n: n["metadata"]["annotations"].update({"hetsched.io/devices": "{not json"}),
            "not JSON",
        ),
        (lambda n: n.update(spec=["not", "an", "object"]), "spec must be an object"),
    ],
)
def test_one_unreadable_node_fails_alone(change: Any, reason: str) -> None:
    request = fixture("filter-nodes.json")
    bad = copy.deepcopy(request["Nodes"]["items"][0])
    bad["metadata"]["name"] = "broken"
    change(bad)
    request["Nodes"]["items"].append(bad)
    with serve(create_app()) as base:
        got = post(base, "filter", request)
        scores = post(base, "prioritize", request)
    assert got["Error"] == ""
    assert [n["metadata"]["name"] for n in got["Nodes"]["items"]] == ["gpu-a"]
    assert reason in got["FailedNodes"]["broken"]
    assert "cpu-only" in got["FailedAndUnresolvableNodes"]
    assert {h["Host"]: h["Score"] for h in scores}["broken"] == 0


def test_a_cached_node_that_cannot_be_read_says_why(
    apiserver: ApiServer, cluster: PodScheduler
) -> None:
    api = cluster.api
    assert isinstance(api, KubeClusterAPI)
    broken = copy.deepcopy(fixture("nodes.json")["items"][0])
    broken["metadata"] = {"name": "gpu-c", "annotations": {"hetsched.io/devices": "oops"}}
    api.core.create_node(broken)
    cluster.sync()
    request = fixture("filter-cache-capable.json")
    request["NodeNames"].append("gpu-c")
    with serve(create_app(cache=cluster)) as base:
        got = post(base, "filter", request)
    assert "not JSON" in got["FailedNodes"]["gpu-c"]
    assert got["NodeNames"] == ["gpu-a"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_pod_like = st.fixed_dictionaries(
    {},
    optional={
        "metadata": _json
        | st.fixed_dictionaries({}, optional={"name": _json, "annotations": _json}),
        "spec": _json
        | st.fixed_dictionaries(
            {},
            optional={
                "containers": st.lists(
                    st.fixed_dictionaries({}, optional={"resources": _json}), max_size=2
                ),
                "priority": _json,
                "tolerations": _json,
            },
        ),
    },
)
_nodes = st.fixed_dictionaries({"items": st.lists(_pod_like | _json, max_size=3)}) | _json
_bodies = (
    _json
    | st.fixed_dictionaries(
        {"Pod": _pod_like, "Nodes": _nodes},
        optional={"NodeNames": _json, "NodeNameToVictims": _json, "NodeNameToMetaVictims": _json},
    )
    | st.fixed_dictionaries(
        {"PodName": _json, "PodNamespace": _json, "Node": _json}, optional={"PodUID": _json}
    )
)


def test_no_request_body_makes_the_extender_fail_with_a_5xx() -> None:
    with serve(create_app()) as base, httpx.Client(base_url=base, timeout=5) as client:

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(verb=st.sampled_from(["filter", "prioritize", "bind", "preempt"]), body=_bodies)
        def check(verb: str, body: Any) -> None:
            answer = client.post(f"/{verb}", json=body)
            assert answer.status_code < 500, answer.text

        check()
