"""Round mode in the Kubernetes scheduler: the same core with a ``rounds`` profile, so a pod
that arrives mid-round waits for the boundary, and there a checkpointable pod that has had
its turn gets its notice (a ``Preempt`` of kind round) and gives its GPU to the waiting one.
Against the API server double, through the official client."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.framework.profile import parse_profile
from hetsched.k8s.api import KubeClusterAPI
from hetsched.k8s.names import CHECKPOINT, NOTICE_CONDITION
from hetsched.k8s.scheduler import PodScheduler
from hetsched.model.lifecycle import JobState
from k8s.apiserver import ApiServer, gpus, node_json, pod_json
from k8s.stepping import wait

Obj = dict[str, Any]
PROFILE = parse_profile({"rounds": {"policy": "las", "round_s": 60, "min_runtime_s": 0}})
DECLARED = '{"notice_s": "30s", "interval_s": "0"}'


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _replica(name: str, owner: str) -> Obj:
    """A checkpointable pod of a ReplicaSet (a stopped job waits for its replacement)."""
    body = pod_json(name, devices={"gpu": 1}, annotations={CHECKPOINT: DECLARED})
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": owner,
            "uid": f"{owner}-uid",
            "controller": True,
        }
    ]
    return body


def _pod(server: ApiServer, name: str) -> Obj | None:
    return server.store.get("pods", "default", name)


def _bound(server: ApiServer, name: str) -> bool:
    obj = _pod(server, name)
    return obj is not None and bool(obj["spec"].get("nodeName"))


def _noticed(server: ApiServer, name: str) -> bool:
    obj = _pod(server, name) or {}
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c["type"] == NOTICE_CONDITION for c in conditions)


@pytest.fixture
def cluster(server: ApiServer, api: KubeClusterAPI) -> ApiServer:
    api.core.create_node(node_json("a", devices=gpus("a", 1)))
    return server


def test_pods_take_turns_on_the_gpu_at_round_boundaries(
    cluster: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = PodScheduler(api, PROFILE, watch_timeout_s=2, clock=clock)
    sched.sync()
    sched.start_watches()
    try:
        api.core.create_namespaced_pod("default", _replica("first-1", "first"))
        wait(sched, lambda: _bound(cluster, "first-1"))
        first = sched.owner["default/first-1"][0]
        clock.now += 10
        api.core.create_namespaced_pod("default", _replica("second-1", "second"))
        wait(sched, lambda: "default/second-1" in sched.owner)
        for _ in range(5):  # mid-round: it waits for the boundary
            sched.step(0.05)
        assert not _bound(cluster, "second-1") and not _noticed(cluster, "first-1")
        clock.now += 50  # the boundary: the first pod has had its turn
        wait(sched, lambda: _noticed(cluster, "first-1"))
        clock.now += 31  # past its notice
        wait(sched, lambda: _pod(cluster, "first-1") is None)
        wait(sched, lambda: _bound(cluster, "second-1"))
        view = sched.core.view.job(first)
        assert view is not None and view.state is JobState.PENDING
    finally:
        sched.stop()
