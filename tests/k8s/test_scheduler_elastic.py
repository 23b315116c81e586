"""An elastic pod group (``hetsched.io/elastic: "true"``) in the Kubernetes scheduler: it
binds as many of its pods as fit (at least ``min-available``), binds the rest when capacity
appears, and a pod of higher priority shrinks it (its last pod deleted) instead of
preempting it whole."""

from __future__ import annotations

from typing import Any

from hetsched.framework.profile import parse_profile
from hetsched.k8s.api import KubeClusterAPI
from hetsched.k8s.names import POD_GROUP, POD_GROUP_ELASTIC, POD_GROUP_MIN
from hetsched.k8s.scheduler import PodScheduler
from k8s.apiserver import ApiServer, gpus, node_json, pod_json
from k8s.stepping import wait

ELASTIC = {
    "labels": {POD_GROUP: "e"},
    "annotations": {POD_GROUP_MIN: "2", POD_GROUP_ELASTIC: "true"},
}
PROFILE = {"queue_sort": "priority", "post_filter": [{"name": "preemption"}]}


def _node_of(server: ApiServer, name: str) -> str:
    pod: Any = server.store.get("pods", "default", name) or {}
    return str((pod.get("spec") or {}).get("nodeName") or "")


def test_an_elastic_group_binds_what_fits_grows_and_shrinks(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    api.core.create_node(node_json("a", devices=gpus("a", 2)))
    for i in range(4):
        api.core.create_namespaced_pod("default", pod_json(f"e{i}", devices={"gpu": 1}, **ELASTIC))
    sched = PodScheduler(api, parse_profile(PROFILE), watch_timeout_s=2)
    sched.sync()
    sched.start_watches()
    try:
        # 2 GPUs: the group starts with 2 of its 4 pods
        wait(sched, lambda: _node_of(server, "e0") == "a" and _node_of(server, "e1") == "a")
        assert _node_of(server, "e2") == "" and _node_of(server, "e3") == ""
        (job,) = [j for j in sched.core.jobs if j.startswith("default/e#")]
        assert sched.core.record(job).count == 2
        # a node joins: the other two are bound into the running group, none restarted
        api.core.create_node(node_json("b", devices=gpus("b", 2)))
        wait(sched, lambda: _node_of(server, "e2") == "b" and _node_of(server, "e3") == "b")
        assert sched.core.record(job).count == 4 and sched.core.record(job).run == 1
        # a pod of higher priority takes one GPU: the group's last pod goes, no other
        high = pod_json("hi", devices={"gpu": 1}, priority=10)
        api.core.create_namespaced_pod("default", high)
        wait(sched, lambda: _node_of(server, "hi") != "")
        assert sched.core.record(job).count == 3
        assert server.store.get("pods", "default", "e3") is None
        assert all(server.store.get("pods", "default", f"e{i}") for i in range(3))
    finally:
        sched.stop()
