"""Gangs bind all or nothing: when one member's Binding fails, the members bound so far are
deleted and the job goes back to the core's queue (never "succeeded"); after a restart the
bound pods of a group are one job again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hetsched.k8s.api import ApiError, KubeClusterAPI
from hetsched.k8s.names import ASSIGNED_DEVICES, POD_GROUP, POD_GROUP_MIN
from hetsched.k8s.scheduler import PodScheduler
from hetsched.model.lifecycle import JobState
from k8s.apiserver import ApiServer, gpus, node_json, pod_json
from k8s.stepping import wait

Obj = dict[str, Any]
GROUP = {"labels": {POD_GROUP: "g"}, "annotations": {POD_GROUP_MIN: "3"}}


@pytest.fixture(params=[0, 4], ids=["inline", "async"])
def workers(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def make(api: Any, workers: int = 0, **kwargs: Any) -> PodScheduler:
    sched = PodScheduler(api, watch_timeout_s=2, bind_workers=workers, **kwargs)
    sched.sync()
    sched.start_watches()
    return sched


def get(server: ApiServer, name: str) -> Obj | None:
    return server.store.get("pods", "default", name)


def node_of(server: ApiServer, name: str) -> str:
    return str(((get(server, name) or {}).get("spec") or {}).get("nodeName") or "")


class FailingBind:
    """Lets the first binding of ``name`` fail: with a 500 (``steal=False``) or because
    another binder took the pod first (409)."""

    def __init__(self, inner: KubeClusterAPI, name: str, steal_to: str = "") -> None:
        self.inner = inner
        self.name = name
        self.steal_to = steal_to
        self.failed = 0

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> bool:
        if name == self.name and not self.failed:
            self.failed += 1
            if not self.steal_to:
                raise ApiError(500, "etcdserver: request timed out")
            body = {"target": {"kind": "Node", "name": self.steal_to}, "metadata": {"name": name}}
            self.inner.core.create_namespaced_pod_binding(
                name, namespace, body, _preload_content=False
            )
        return self.inner.bind(namespace, name, uid, node, annotations)


def create_gang(api: KubeClusterAPI, names: list[str]) -> None:
    for name in names:
        api.core.create_namespaced_pod("default", pod_json(name, devices={"gpu": 1}, **GROUP))


def gang_job(sched: PodScheduler) -> str:
    jobs = {job for job, _ in sched.owner.values() if job.startswith("default/g#")}
    (job,) = jobs
    return job


def test_one_member_failing_to_bind_unbinds_the_gang_and_requeues_it(
    server: ApiServer, api: KubeClusterAPI, workers: int
) -> None:
    for n in ("a", "b"):
        api.core.create_node(node_json(n, devices=gpus(n, 2)))
    failing = FailingBind(api, "w2")
    sched = make(failing, workers)
    try:
        create_gang(api, ["w0", "w1", "w2"])
        wait(sched, lambda: failing.failed == 1)
        job = gang_job(sched)
        wait(sched, lambda: get(server, "w0") is None and get(server, "w1") is None)
        wait(sched, lambda: sched.core.view.job(job).state is JobState.PENDING)  # type: ignore[union-attr]
        view = sched.core.view.job(job)
        assert view is not None
        changes = [t.cause for t in view.history]
        assert "run 1 could not start: binding default/w2" in changes[-1]
        assert not any("succeeded" in c for c in changes)
        # no member stays bound, and the one that failed carries no assignment
        assert node_of(server, "w2") == ""
        assert ASSIGNED_DEVICES not in (get(server, "w2") or {})["metadata"].get("annotations", {})
        assert sched.owner["default/w2"] == (job, 2)
        # every allocation is given back once the deleted pods are gone
        wait(sched, lambda: int(sched.core.state.dev_free.sum()) == 4000)
        # the group recreates the deleted members: the gang binds again, whole
        create_gang(api, ["w0", "w1"])
        wait(sched, lambda: all(node_of(server, f"w{i}") for i in range(3)))
    finally:
        sched.stop()
    view = sched.core.view.job(job)
    assert view is not None and (view.state, view.run) == (JobState.RUNNING, 2)
    devices = [
        e["id"]
        for i in range(3)
        for e in json.loads(
            (get(server, f"w{i}") or {})["metadata"]["annotations"][ASSIGNED_DEVICES]
        )
    ]
    assert len(set(devices)) == 3


def test_a_member_bound_by_someone_else_unbinds_the_rest_of_the_gang(
    server: ApiServer, api: KubeClusterAPI, workers: int
) -> None:
    for n in ("a", "b"):
        api.core.create_node(node_json(n, devices=gpus(n, 2)))
    api.core.create_node(node_json("elsewhere", cpu="8"))
    failing = FailingBind(api, "w1", steal_to="elsewhere")
    sched = make(failing, workers)
    try:
        create_gang(api, ["w0", "w1", "w2"])
        wait(sched, lambda: failing.failed == 1)
        job = gang_job(sched)
        wait(sched, lambda: get(server, "w0") is None)
        wait(sched, lambda: sched.core.view.job(job).state is JobState.PENDING)  # type: ignore[union-attr]
        # w1 went elsewhere and is accounted there, not as our member
        wait(sched, lambda: any(j.endswith("@elsewhere") for j in sched.core.jobs))
    finally:
        sched.stop()
    assert node_of(server, "w1") == "elsewhere"
    assert node_of(server, "w2") == ""  # never tried: w1 failed before it
    assert sched.conflicts == ["default/w1"]
    assert sched.owner["default/w1"][0].endswith("@elsewhere")  # accounted, not our member


def test_a_lone_pod_whose_binding_fails_waits_and_is_bound_again(
    server: ApiServer, api: KubeClusterAPI, workers: int
) -> None:
    api.core.create_node(node_json("a", devices=gpus("a", 1)))
    clock = [1000.0]
    failing = FailingBind(api, "p")
    sched = make(failing, workers, clock=lambda: clock[0])
    try:
        api.core.create_namespaced_pod("default", pod_json("p", devices={"gpu": 1}))
        wait(sched, lambda: failing.failed == 1)
        job = sched.owner["default/p"][0]
        wait(sched, lambda: sched.core.view.job(job).state is JobState.PENDING)  # type: ignore[union-attr]
        messages = [
            e["message"]
            for e in server.store.items("events", None, "")
            if e["reason"] == "FailedScheduling"
        ]
        assert any("binding to a failed: 500" in m for m in messages)
        assert node_of(server, "p") == ""
        clock[0] += 1.5  # past the first backoff (1 s)
        wait(sched, lambda: node_of(server, "p") == "a")
    finally:
        sched.stop()
    view = sched.core.view.job(job)
    assert view is not None and view.run == 2
    assert any(t.cause.startswith("run 1 could not start") for t in view.history)
    assert view.restarts == 0


def test_after_a_restart_the_bound_pods_of_a_group_are_one_job(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    for n in ("a", "b"):
        api.core.create_node(node_json(n, devices=gpus(n, 2)))
    first = make(api)
    try:
        create_gang(api, ["w0", "w1", "w2"])
        wait(first, lambda: all(node_of(server, f"w{i}") for i in range(3)))
    finally:
        first.stop()
    second = make(api)
    try:
        jobs = {second.owner[f"default/w{i}"] for i in range(3)}
        (job,) = {j for j, _ in jobs}
        assert sorted(t for _, t in jobs) == [0, 1, 2]
        view = second.core.view.job(job)
        assert view is not None
        assert (view.job.replicas, view.job.gang_min, view.state) == (3, 3, JobState.RUNNING)
        assert second.core.state.dev_free.sum() == 1000  # 3 of the 4 GPUs held
        # a member ends: the gang is one job, so it ends as one (not three one-pod jobs)
        server.store.set_phase("default", "w0", "Failed")
        wait(second, lambda: second.core.view.job(job).state is JobState.FAILED)  # type: ignore[union-attr]
    finally:
        second.stop()
