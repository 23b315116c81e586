"""Preemption nominates the preemptor's pods (``status.nominatedNodeName``), as
kube-scheduler does, and the nomination goes when the pod binds or the core gives up."""

from __future__ import annotations

from typing import Any

from hetsched.framework.profile import parse_profile
from hetsched.k8s.api import KubeClusterAPI
from hetsched.k8s.scheduler import PodScheduler
from k8s.apiserver import ApiServer, gpus, node_json, pod_json
from k8s.stepping import wait

Obj = dict[str, Any]
PROFILE = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
#: holds a deleted pod in the double until a test removes it (a pod still terminating)
HOLD = "test.hetsched.io/terminating"


def make(api: KubeClusterAPI) -> PodScheduler:
    sched = PodScheduler(api, PROFILE, watch_timeout_s=2)
    sched.sync()
    sched.start_watches()
    return sched


def get(server: ApiServer, name: str) -> Obj:
    obj = server.store.get("pods", "default", name)
    assert obj is not None
    return obj


def nominated(server: ApiServer, name: str) -> str | None:
    value = get(server, name).get("status", {}).get("nominatedNodeName")
    return None if value is None else str(value)


def node_of(server: ApiServer, name: str) -> str:
    return str(get(server, name)["spec"].get("nodeName") or "")


def terminating(name: str, priority: int) -> Obj:
    body = pod_json(name, devices={"gpu": 1}, priority=priority)
    body["metadata"]["finalizers"] = [HOLD]
    return body


def let_go(api: KubeClusterAPI, name: str) -> None:
    api.core.patch_namespaced_pod(name, "default", {"metadata": {"finalizers": None}})


def test_the_preemptor_is_nominated_while_its_victim_stops_and_cleared_on_bind(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    api.core.create_node(node_json("a", devices=gpus("a", 1)))
    api.core.create_node(node_json("b", cpu="1"))
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", terminating("low", 0))
        wait(sched, lambda: node_of(server, "low") == "a")
        api.core.create_namespaced_pod("default", pod_json("high", devices={"gpu": 1}, priority=9))
        wait(sched, lambda: bool(get(server, "low")["metadata"].get("deletionTimestamp")))
        wait(sched, lambda: nominated(server, "high") == "a")
        assert node_of(server, "high") == ""
        let_go(api, "low")
        wait(sched, lambda: node_of(server, "high") == "a")
        wait(sched, lambda: nominated(server, "high") is None)
    finally:
        sched.stop()
    assert "nominatedNodeName" not in get(server, "high")["status"]


def test_a_gang_preemptor_is_nominated_on_its_victims_nodes(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    for n in ("a", "b"):
        api.core.create_node(node_json(n, devices=gpus(n, 1)))
    sched = make(api)
    group = {
        "labels": {"hetsched.io/pod-group": "g"},
        "annotations": {"hetsched.io/min-available": "2"},
    }
    try:
        for name in ("low-1", "low-2"):
            api.core.create_namespaced_pod("default", terminating(name, 0))
        wait(sched, lambda: bool(node_of(server, "low-1") and node_of(server, "low-2")))
        for name in ("w0", "w1"):
            body = pod_json(name, devices={"gpu": 1}, priority=9, **group)
            api.core.create_namespaced_pod("default", body)
        wait(sched, lambda: bool(nominated(server, "w0") and nominated(server, "w1")))
        assert {nominated(server, "w0"), nominated(server, "w1")} == {"a", "b"}
        let_go(api, "low-1")
        let_go(api, "low-2")
        wait(sched, lambda: bool(node_of(server, "w0") and node_of(server, "w1")))
        wait(sched, lambda: nominated(server, "w0") is None and nominated(server, "w1") is None)
    finally:
        sched.stop()


def test_the_nomination_is_cleared_when_the_core_gives_up(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    api.core.create_node(node_json("a", devices=gpus("a", 1)))
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", terminating("low", 0))
        wait(sched, lambda: node_of(server, "low") == "a")
        api.core.create_namespaced_pod("default", pod_json("high", devices={"gpu": 1}, priority=9))
        wait(sched, lambda: nominated(server, "high") == "a")
        # the node goes away while the victim stops: the preemptor fits nowhere now
        api.core.delete_node("a")
        wait(sched, lambda: nominated(server, "high") is None)
    finally:
        sched.stop()
    assert node_of(server, "high") == ""
    assert sched.nominations.nodes == {}
