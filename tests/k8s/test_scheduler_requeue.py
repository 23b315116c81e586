"""A preempted job goes back to the core's queue, as in every driver: its pods are deleted,
and the pods its controller recreates are matched to it rather than submitted anew."""

from __future__ import annotations

from typing import Any

from hetsched.framework.profile import parse_profile
from hetsched.k8s.api import KubeClusterAPI
from hetsched.k8s.scheduler import PodScheduler
from hetsched.model.lifecycle import JobState
from k8s.apiserver import ApiServer, gpus, node_json, pod_json
from k8s.stepping import wait

Obj = dict[str, Any]
PROFILE = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})


def make(api: KubeClusterAPI, **kwargs: Any) -> PodScheduler:
    sched = PodScheduler(api, PROFILE, watch_timeout_s=2, **kwargs)
    sched.sync()
    sched.start_watches()
    return sched


def owned(name: str, uid: str, priority: int) -> Obj:
    body = pod_json(name, devices={"gpu": 1}, priority=priority)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "rs",
            "uid": uid,
            "controller": True,
        }
    ]
    return body


def node_of(server: ApiServer, name: str) -> str:
    obj = server.store.get("pods", "default", name)
    return str((obj or {}).get("spec", {}).get("nodeName") or "")


def job_of(sched: PodScheduler, pod: str) -> str:
    return sched.owner[f"default/{pod}"][0]


def changes(sched: PodScheduler, job_id: str) -> list[str]:
    view = sched.core.view.job(job_id)
    assert view is not None
    return [t.cause for t in view.history]


def test_a_preempted_controller_pod_is_requeued_and_its_replacement_runs_it(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    api.core.create_node(node_json("a", devices=gpus("a", 1)))
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", owned("low-1", "rs-uid", 0))
        wait(sched, lambda: node_of(server, "low-1") == "a")
        victim = job_of(sched, "low-1")
        api.core.create_namespaced_pod("default", pod_json("high", devices={"gpu": 1}, priority=9))
        wait(sched, lambda: server.store.get("pods", "default", "low-1") is None)
        wait(sched, lambda: node_of(server, "high") == "a")
        view = sched.core.view.job(victim)
        assert view is not None and view.state is JobState.PENDING  # requeued, not cancelled
        assert any(c.startswith("preempted by") for c in changes(sched, victim))
        jobs_before = len(sched.core.jobs)
        # the ReplicaSet recreates its pod: it takes the requeued job's task
        api.core.create_namespaced_pod("default", owned("low-2", "rs-uid", 0))
        wait(sched, lambda: "default/low-2" in sched.owner)
        assert job_of(sched, "low-2") == victim and len(sched.core.jobs) == jobs_before
        # once the preemptor ends, the same job runs again, in its second run
        server.store.set_phase("default", "high", "Succeeded")
        wait(sched, lambda: node_of(server, "low-2") == "a")
        view = sched.core.view.job(victim)
        assert view is not None and (view.state, view.run) == (JobState.RUNNING, 2)
    finally:
        sched.stop()


def test_the_core_may_place_the_task_before_its_pod_is_recreated(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    api.core.create_node(node_json("a", devices=gpus("a", 1)))
    api.core.create_node(node_json("b", devices=gpus("b", 1)))
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", owned("low-1", "rs-uid", 0))
        wait(sched, lambda: bool(node_of(server, "low-1")))
        victim = job_of(sched, "low-1")
        other = "b" if node_of(server, "low-1") == "a" else "a"
        blocker = pod_json("blocker", devices={"gpu": 1}, priority=5)
        api.core.create_namespaced_pod("default", blocker)
        wait(sched, lambda: node_of(server, "blocker") == other)
        api.core.create_namespaced_pod("default", pod_json("high", devices={"gpu": 1}, priority=9))
        wait(sched, lambda: server.store.get("pods", "default", "low-1") is None)
        # the blocker ends before the replacement exists: the core binds the requeued job
        server.store.set_phase("default", "blocker", "Succeeded")
        wait(sched, lambda: _running(sched, victim))
        assert sched.members[victim] == [""]  # placed in the core, no pod to bind yet
        api.core.create_namespaced_pod("default", owned("low-2", "rs-uid", 0))
        wait(sched, lambda: node_of(server, "low-2") == other)
    finally:
        sched.stop()


def _running(sched: PodScheduler, job_id: str) -> bool:
    view = sched.core.view.job(job_id)
    return view is not None and view.state is JobState.RUNNING


def test_a_preempted_bare_pod_is_cancelled_once_it_is_gone(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    api.core.create_node(node_json("a", devices=gpus("a", 1)))
    sched = make(api)
    try:
        api.core.create_namespaced_pod("default", pod_json("low", devices={"gpu": 1}, priority=0))
        wait(sched, lambda: node_of(server, "low") == "a")
        victim = job_of(sched, "low")
        api.core.create_namespaced_pod("default", pod_json("high", devices={"gpu": 1}, priority=9))
        wait(sched, lambda: node_of(server, "high") == "a")
        wait(sched, lambda: not _running(sched, victim) and _ended(sched, victim))
    finally:
        sched.stop()
    view = sched.core.view.job(victim)
    assert view is not None and view.state is JobState.CANCELLED
    causes = [t.cause for t in view.history]
    assert causes[-2].startswith("preempted by")
    assert causes[-1] == "its pods were deleted and no controller recreates them"


def _ended(sched: PodScheduler, job_id: str) -> bool:
    view = sched.core.view.job(job_id)
    return view is not None and view.state is JobState.CANCELLED


def test_a_job_whose_pods_are_not_recreated_in_time_is_cancelled(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    api.core.create_node(node_json("a", devices=gpus("a", 1)))
    clock = [1000.0]
    sched = make(api, clock=lambda: clock[0], recreate_timeout_s=60)
    try:
        api.core.create_namespaced_pod("default", owned("low-1", "rs-uid", 0))
        wait(sched, lambda: node_of(server, "low-1") == "a")
        victim = job_of(sched, "low-1")
        api.core.create_namespaced_pod("default", pod_json("high", devices={"gpu": 1}, priority=9))
        wait(sched, lambda: node_of(server, "high") == "a")
        assert not _ended(sched, victim)
        clock[0] += 61
        wait(sched, lambda: _ended(sched, victim))
    finally:
        sched.stop()
    view = sched.core.view.job(victim)
    assert view is not None
    assert view.history[-1].cause == "no pod was recreated for it within 60s"
