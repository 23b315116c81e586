"""The Kubernetes scheduler places pod groups inside network domains: levels from its
``topology_levels`` (node labels), requests from hetsched's annotations or Kueue's
``podset-required-topology`` / ``podset-preferred-topology``, so Kueue workloads run
unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.k8s.api import KubeClusterAPI
from hetsched.k8s.names import (
    KUEUE_PREFERRED,
    KUEUE_REQUIRED,
    POD_GROUP,
    POD_GROUP_MIN,
    TOPOLOGY_REQUIRED,
    TOPOLOGY_SLICE_SIZE,
)
from hetsched.k8s.podgroups import PodGroups
from hetsched.k8s.podrequest import TranslateError
from hetsched.k8s.scheduler import PodScheduler
from hetsched.k8s.topology import COMPLETION_INDEX, pod_topology
from hetsched.model.topology import TopologyRequest
from k8s.apiserver import ApiServer, gpus, node_json, pod_json
from k8s.stepping import wait

Obj = dict[str, Any]
RACK = "network.hetsched.io/rack"


def _cluster(api: KubeClusterAPI) -> None:
    """Rack r1: a0, a1; rack r2: b0, b1, b2 (2 GPUs each, first in row order: r1)."""
    for name, rack in (("a0", "r1"), ("a1", "r1"), ("b0", "r2"), ("b1", "r2"), ("b2", "r2")):
        api.core.create_node(node_json(name, devices=gpus(name, 2), labels={RACK: rack}))


def _group(api: KubeClusterAPI, group: str, pods: int, annotations: dict[str, str]) -> None:
    for i in range(pods):
        meta = {POD_GROUP_MIN: str(pods), **annotations}
        pod = pod_json(
            f"{group}-{i}", devices={"gpu": 2}, annotations=meta, labels={POD_GROUP: group}
        )
        api.core.create_namespaced_pod("default", pod)


def _node(server: ApiServer, name: str) -> str:
    pod = server.store.get("pods", "default", name) or {}
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _scheduler(api: KubeClusterAPI) -> PodScheduler:
    sched = PodScheduler(api, watch_timeout_s=2, topology_levels=(RACK,))
    sched.sync()
    sched.start_watches()
    return sched


def test_kueue_required_topology_keeps_a_group_inside_one_rack(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    _cluster(api)
    sched = _scheduler(api)
    try:
        # r1 holds 2 pods of 2 GPUs, r2 3: a group of 3 goes to r2 (best fit alone: a0 first)
        _group(api, "train", 3, {KUEUE_REQUIRED: RACK})
        names = [f"train-{i}" for i in range(3)]
        wait(sched, lambda: all(_node(server, n) for n in names))
        assert [_node(server, n) for n in names] == ["b0", "b1", "b2"]
        # a group of 2 more that requires a rack: r1 is the only one left
        _group(api, "tune", 2, {TOPOLOGY_REQUIRED: RACK})
        wait(sched, lambda: all(_node(server, f"tune-{i}") for i in range(2)))
        assert [_node(server, f"tune-{i}") for i in range(2)] == ["a0", "a1"]
    finally:
        sched.stop()


def test_kueue_preferred_topology_spreads_when_no_rack_holds_the_group(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    _cluster(api)
    sched = _scheduler(api)
    try:
        # 4 pods: no rack holds them; across racks, the largest (r2) first, in pod order
        _group(api, "big", 4, {KUEUE_PREFERRED: RACK})
        names = [f"big-{i}" for i in range(4)]
        wait(sched, lambda: all(_node(server, n) for n in names))
        assert [_node(server, n) for n in names] == ["b0", "b1", "b2", "a0"]
    finally:
        sched.stop()


def test_required_group_that_no_rack_holds_waits_unbound(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    _cluster(api)
    sched = _scheduler(api)
    try:
        _group(api, "big", 4, {KUEUE_REQUIRED: RACK})
        wait(sched, lambda: any(job.startswith("default/big") for job, _ in sched.owner.values()))
        (job_id,) = {job for job, _ in sched.owner.values()}
        wait(sched, lambda: sched.core.view.job(job_id).explanation is not None)
        explanation = sched.core.view.job(job_id).explanation
        assert explanation is not None
        assert explanation.summary == (
            "topology (required rack): no rack could hold its 4 tasks even when empty "
            "(largest: rack r2 with 3)"
        )
        assert [_node(server, f"big-{i}") for i in range(4)] == [""] * 4
    finally:
        sched.stop()


def test_annotations_translate_and_conflicts_name_the_annotation() -> None:
    assert pod_topology({KUEUE_REQUIRED: RACK}, "pod p") == TopologyRequest(required=RACK)
    both = {TOPOLOGY_REQUIRED: RACK, KUEUE_REQUIRED: RACK}
    assert pod_topology(both, "pod p") == TopologyRequest(required=RACK)
    sliced = {
        KUEUE_REQUIRED: RACK,
        TOPOLOGY_SLICE_SIZE: "2",
        "kueue.x-k8s.io/podset-slice-required-topology": "h",
    }
    assert pod_topology(sliced, "pod p") == TopologyRequest(RACK, None, 2, "h")
    assert pod_topology({}, "pod p") is None
    cases = [
        ({TOPOLOGY_REQUIRED: RACK, KUEUE_REQUIRED: "x"}, "annotations disagree"),
        ({KUEUE_REQUIRED: RACK, KUEUE_PREFERRED: RACK}, "exclude each other"),
        ({KUEUE_REQUIRED: RACK, TOPOLOGY_SLICE_SIZE: "2"}, "go together"),
        ({KUEUE_REQUIRED: ""}, f"annotation {KUEUE_REQUIRED} is empty"),
    ]
    for given, error in cases:
        with pytest.raises(TranslateError, match=error):
            pod_topology(given, "pod p")


def test_a_group_orders_its_pods_by_completion_index_then_name() -> None:
    groups = PodGroups()
    pods: dict[str, Obj] = {}
    for name, index in (("w-a", "10"), ("w-b", "2"), ("w-c", None), ("w-d", "0")):
        annotations = {POD_GROUP_MIN: "4"}
        if index is not None:
            annotations[COMPLETION_INDEX] = index
        pods[f"default/{name}"] = pod_json(name, annotations=annotations, labels={POD_GROUP: "g"})
        groups.add("default/g", f"default/{name}")
    ((group, keys, minimum),) = list(groups.ready(pods, lambda obj, text: None))
    # ranks 0, 2, 10 (numerically), then the pod without an index
    assert keys == ["default/w-d", "default/w-b", "default/w-a", "default/w-c"]
    assert (group, minimum) == ("default/g", 4)


def test_the_scheduler_refuses_a_level_listed_twice_before_it_connects() -> None:
    args = ["k8s", "scheduler", "--topology-level", RACK, "--topology-level", RACK]
    result = CliRunner().invoke(app, [*args, "--kubeconfig", "/nonexistent"])
    assert result.exit_code == 2
    assert f"--topology-level: levels[1]: level '{RACK}' is listed twice" in " ".join(
        result.output.split()
    )
