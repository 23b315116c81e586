"""The Kubernetes scheduler through the official client against the API server double
(tests/k8s/apiserver.py) over real HTTP on 127.0.0.1.

Decisions are driven on the test's thread (``step``); only the watches run on threads.
Every wait is bounded by a deadline on the number of steps, never by a wall-clock assert.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from hetsched.k8s.api import KubeClusterAPI
from hetsched.k8s.leader import LeaseLock
from hetsched.k8s.names import ASSIGN_PHASE, ASSIGNED_DEVICES, POD_GROUP, POD_GROUP_MIN
from hetsched.k8s.scheduler import PodScheduler, run_leading
from k8s.apiserver import ApiServer, gpus, node_json, pod_json
from k8s.stepping import wait

Obj = dict[str, Any]


def make(api: Any, **kwargs: Any) -> PodScheduler:
    sched = PodScheduler(api, watch_timeout_s=2, **kwargs)
    sched.sync()
    sched.start_watches()
    return sched


def create_node(api: KubeClusterAPI, body: Obj) -> None:
    api.core.create_node(body)


def create_pod(api: KubeClusterAPI, body: Obj) -> None:
    api.core.create_namespaced_pod(body["metadata"]["namespace"], body)


def pod(server: ApiServer, name: str, namespace: str = "default") -> Obj:
    obj = server.store.get("pods", namespace, name)
    assert obj is not None
    return obj


def node_of(server: ApiServer, name: str) -> str:
    return str(pod(server, name)["spec"].get("nodeName") or "")


def assigned(server: ApiServer, name: str) -> list[Obj]:
    """The pod's assigned devices as ``{"id", "share"}`` (each entry's resource aside)."""
    raw = pod(server, name)["metadata"].get("annotations", {}).get(ASSIGNED_DEVICES)
    return [{"id": e["id"], "share": e["share"]} for e in json.loads(raw)] if raw else []


def events_for(server: ApiServer, name: str, reason: str) -> list[Obj]:
    return [
        e
        for e in server.store.items("events", None, "")
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def test_gang_of_four_waits_for_its_group_then_binds_all_at_once(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    for n in ("a", "b"):
        create_node(api, node_json(n, devices=gpus(n, 4)))
    sched = make(api)
    group = {"labels": {POD_GROUP: "train"}, "annotations": {POD_GROUP_MIN: "4"}}
    try:
        for i in range(3):
            create_pod(api, pod_json(f"w{i}", devices={"gpu": 2}, **group))
        # (the pods may arrive in more than one batch: w0 is told again as the group grows)
        wait(
            sched,
            lambda: any(
                "3 of the 4 pods" in e["message"]
                for e in events_for(server, "w0", "FailedScheduling")
            ),
        )
        assert len(events_for(server, "w2", "FailedScheduling")) == 1
        assert all(node_of(server, f"w{i}") == "" for i in range(3))
        create_pod(api, pod_json("w3", devices={"gpu": 2}, **group))
        wait(sched, lambda: all(node_of(server, f"w{i}") for i in range(4)))
    finally:
        sched.stop()
    devices = [d["id"] for i in range(4) for d in assigned(server, f"w{i}")]
    assert len(devices) == len(set(devices)) == 8
    for i in range(4):
        meta = pod(server, f"w{i}")["metadata"]
        assert meta["annotations"][ASSIGN_PHASE] == "allocating"
        assert all(d["id"].startswith(node_of(server, f"w{i}")) for d in assigned(server, f"w{i}"))
    # the annotations came with the bindings: one write per pod
    assert [b[3] for b in server.store.bindings] == [201] * 4
    assert server.store.requests[("PATCH", "pods", "")] == 0


def test_fractional_gpu_pods_share_one_device(server: ApiServer, api: KubeClusterAPI) -> None:
    create_node(api, node_json("a", devices=gpus("a", 2)))
    sched = make(api)
    try:
        for name in ("s1", "s2"):
            create_pod(
                api,
                pod_json(name, devices={"gpu-shared": 1}, annotations={"hetsched.io/share": "300"}),
            )
        wait(sched, lambda: bool(node_of(server, "s1") and node_of(server, "s2")))
    finally:
        sched.stop()
    first, second = assigned(server, "s1"), assigned(server, "s2")
    assert first[0]["share"] == second[0]["share"] == 300
    assert first[0]["id"] == second[0]["id"]  # packed on one device, the other stays whole
    scheduled = events_for(server, "s1", "Scheduled")
    assert scheduled[0]["type"] == "Normal"
    assert scheduled[0]["message"] == "Successfully assigned default/s1 to a"


def test_fpga_pod_goes_to_the_node_with_an_fpga(server: ApiServer, api: KubeClusterAPI) -> None:
    create_node(api, node_json("gpu-node", devices=gpus("gpu-node", 4)))
    fpga = [{"id": "f0", "class": "fpga", "vendor": "xilinx", "model": "U250"}]
    create_node(api, node_json("fpga-node", devices=fpga))
    sched = make(api)
    try:
        create_pod(api, pod_json("f", devices={"fpga": 1}))
        wait(sched, lambda: bool(node_of(server, "f")))
    finally:
        sched.stop()
    assert node_of(server, "f") == "fpga-node"
    assert assigned(server, "f") == [{"id": "f0", "share": 1000}]


def test_a_pod_that_cannot_fit_gets_failed_scheduling_with_the_explanation(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    create_node(api, node_json("a", devices=gpus("a", 4)))
    sched = make(api)
    try:
        create_pod(api, pod_json("big", devices={"gpu": 8}))
        wait(sched, lambda: bool(events_for(server, "big", "FailedScheduling")))
    finally:
        sched.stop()
    (event,) = events_for(server, "big", "FailedScheduling")
    explanation = sched.core.record(sched.owner["default/big"][0]).explanation
    assert explanation is not None
    assert event["message"] == str(explanation)
    assert "gpu" in event["message"]
    assert event["type"] == "Warning"
    assert event["action"] == "Scheduling"
    assert event["involvedObject"]["kind"] == "Pod"
    assert event["involvedObject"]["uid"] == pod(server, "big")["metadata"]["uid"]
    assert node_of(server, "big") == ""
    (condition,) = pod(server, "big")["status"]["conditions"]
    assert condition["type"] == "PodScheduled"
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"] == event["message"]


class _Racing:
    """A ClusterAPI that lets another binder win the race just before our bind."""

    def __init__(self, inner: KubeClusterAPI, server: ApiServer, node: str) -> None:
        self.inner = inner
        self.server = server
        self.node = node

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> bool:
        body = {"target": {"kind": "Node", "name": self.node}, "metadata": {"name": name}}
        self.inner.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
        return self.inner.bind(namespace, name, uid, node, annotations)


def test_409_on_bind_means_someone_else_won(server: ApiServer, api: KubeClusterAPI) -> None:
    create_node(api, node_json("a", devices=gpus("a", 1)))
    create_node(api, node_json("b", devices=gpus("b", 1)))
    sched = make(api)
    sched.api = _Racing(api, server, "b")
    try:
        create_pod(api, pod_json("p", devices={"gpu": 1}))
        wait(sched, lambda: bool(sched.conflicts))
        # the pod is accounted on the node it really went to
        wait(sched, lambda: any(j.endswith("@b") for j in sched.core.jobs))
    finally:
        sched.stop()
    assert sched.conflicts == ["default/p"]
    assert [b[3] for b in server.store.bindings] == [201, 409]
    assert node_of(server, "p") == "b"
    state = sched.core.state
    assert state.free_share("b-gpu0") == 0
    assert state.free_share("a-gpu0") == 1000  # our assumption was dropped


def test_restart_rebuilds_state_from_the_api_server(server: ApiServer, api: KubeClusterAPI) -> None:
    create_node(api, node_json("a", devices=gpus("a", 1)))
    first = make(api)
    try:
        create_pod(api, pod_json("p1", devices={"gpu": 1}))
        wait(first, lambda: bool(node_of(server, "p1")))
    finally:
        first.stop()
    # a new instance: p1 is bound, so the only GPU counts as allocated
    second = make(api)
    try:
        assert second.core.state.free_share("a-gpu0") == 0
        create_pod(api, pod_json("p2", devices={"gpu": 1}))
        wait(second, lambda: bool(events_for(server, "p2", "FailedScheduling")))
        assert node_of(server, "p2") == ""
        # p1 ends: its GPU is free again and p2 gets it
        server.store.set_phase("default", "p1", "Succeeded")
        wait(second, lambda: node_of(server, "p2") == "a")
    finally:
        second.stop()
    assert assigned(server, "p2") == [{"id": "a-gpu0", "share": 1000}]


def test_pods_of_other_schedulers_count_against_capacity(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    create_node(api, node_json("a", cpu="4"))
    other = pod_json("other", cpu="3", scheduler="default-scheduler")
    other["spec"]["nodeName"] = "a"
    create_pod(api, other)
    sched = make(api)
    try:
        create_pod(api, pod_json("mine", cpu="2"))
        wait(sched, lambda: bool(events_for(server, "mine", "FailedScheduling")))
        api.core.delete_namespaced_pod("other", "default")
        wait(sched, lambda: node_of(server, "mine") == "a")
    finally:
        sched.stop()
    assert [b[1] for b in server.store.bindings] == ["mine"]  # never bound "other"


def test_pods_of_another_scheduler_are_not_scheduled(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    create_node(api, node_json("a"))
    create_pod(api, pod_json("theirs", scheduler="default-scheduler"))
    sched = make(api)
    try:
        create_pod(api, pod_json("mine"))
        wait(sched, lambda: node_of(server, "mine") == "a")
    finally:
        sched.stop()
    assert node_of(server, "theirs") == ""
    assert events_for(server, "theirs", "FailedScheduling") == []


def test_preemption_deletes_the_victim_and_binds_the_preemptor(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    from hetsched.framework.profile import parse_profile

    create_node(api, node_json("a", devices=gpus("a", 1)))
    profile = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
    sched = make(api, profile=profile)
    try:
        create_pod(api, pod_json("low", devices={"gpu": 1}, priority=0))
        wait(sched, lambda: bool(node_of(server, "low")))
        create_pod(api, pod_json("high", devices={"gpu": 1}, priority=100))
        wait(sched, lambda: server.store.get("pods", "default", "low") is None)
        wait(sched, lambda: node_of(server, "high") == "a")
    finally:
        sched.stop()
    assert events_for(server, "low", "Preempted")


def test_watch_expiry_relists(server: ApiServer, api: KubeClusterAPI) -> None:
    create_node(api, node_json("a"))
    sched = make(api)
    try:
        sched.stop()
        server.store.compact()
        create_pod(api, pod_json("p"))
        server.store.compact()
        sched._rv["pods"] = "1"  # a version the double no longer has
        sched.start_watches()
        wait(sched, lambda: node_of(server, "p") == "a")
    finally:
        sched.stop()


# -- leader election ------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_lease_one_leader_then_takeover_after_expiry(api: KubeClusterAPI) -> None:
    clock = FakeClock()
    a = LeaseLock(api, "kube-system", "hetsched", "a", lease_duration_s=15, clock=clock)
    b = LeaseLock(api, "kube-system", "hetsched", "b", lease_duration_s=15, clock=clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.t += 10
    assert a.try_acquire_or_renew()  # renewed: b sees a new record and waits again
    assert not b.try_acquire_or_renew()
    clock.t += 14
    assert not b.try_acquire_or_renew()  # 14 s since b saw the renewal: not expired yet
    clock.t += 2
    assert b.try_acquire_or_renew()  # a stopped renewing: b takes over
    lease = api.get_lease("kube-system", "hetsched")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # a sees b's lease and steps down at once
    assert not a.leading


def test_lease_update_with_a_stale_resource_version_conflicts(api: KubeClusterAPI) -> None:
    a = LeaseLock(api, "kube-system", "hetsched", "a")
    assert a.try_acquire_or_renew()
    stale = api.get_lease("kube-system", "hetsched")
    assert stale is not None
    assert a.try_acquire_or_renew()  # the renewal moves the resourceVersion on
    stale["spec"]["holderIdentity"] = "intruder"
    assert api.replace_lease("kube-system", "hetsched", stale) is None  # 409
    body = {"metadata": {"name": "hetsched"}, "spec": {"holderIdentity": "late"}}
    assert api.create_lease("kube-system", body) is None  # 409 AlreadyExists


def test_release_lets_the_next_candidate_in_at_once(api: KubeClusterAPI) -> None:
    clock = FakeClock()
    a = LeaseLock(api, "ns", "l", "a", clock=clock)
    b = LeaseLock(api, "ns", "l", "b", clock=clock)
    assert a.try_acquire_or_renew()
    a.release()
    assert b.try_acquire_or_renew()


def test_a_leader_that_cannot_renew_past_the_deadline_steps_down(api: KubeClusterAPI) -> None:
    clock = FakeClock()
    a = LeaseLock(api, "ns", "l", "a", renew_deadline_s=10, clock=clock)
    assert a.try_acquire_or_renew()

    class Failing:
        def __getattr__(self, name: str) -> Any:
            return getattr(api, name)

        def replace_lease(self, *args: Any) -> None:
            return None  # every renewal conflicts

    a.api = Failing()
    clock.t += 5
    assert a.try_acquire_or_renew()  # within the deadline it still leads
    clock.t += 6
    assert not a.try_acquire_or_renew()
    assert a.lost()


def test_run_leading_schedules_only_while_it_holds_the_lease(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    create_node(api, node_json("a"))
    create_pod(api, pod_json("p"))
    holder = LeaseLock(api, "kube-system", "hetsched", "other", lease_duration_s=1)
    assert holder.try_acquire_or_renew()
    sched = PodScheduler(api, watch_timeout_s=1)
    lock = LeaseLock(api, "kube-system", "hetsched", "me", lease_duration_s=1, retry_period_s=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=run_leading, args=(sched, lock, stop), daemon=True)
    thread.start()
    try:
        assert not lock.leading
        assert server.store.bindings == []  # the other holder leads: we do nothing
        # the other holder stops renewing; after the lease duration we take over and bind
        for _ in range(200):
            if node_of(server, "p"):
                break
            thread.join(0.05)
        assert node_of(server, "p") == "a"
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    lease = api.get_lease("kube-system", "hetsched")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == ""  # released on the way out


# -- the command ----------------------------------------------------------------------------


def test_the_cli_command_schedules_against_the_api_server(
    server: ApiServer, api: KubeClusterAPI, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "double", "cluster": {"server": server.url}}],
                "users": [{"name": "test", "user": {}}],
                "contexts": [{"name": "test", "context": {"cluster": "double", "user": "test"}}],
                "current-context": "test",
            }
        )
    )
    create_node(api, node_json("a", devices=gpus("a", 1)))
    create_pod(api, pod_json("p", devices={"gpu": 1}))
    command = [
        str(Path(sys.executable).parent / "hetsched"),
        "k8s",
        "scheduler",
        "--kubeconfig",
        str(kubeconfig),
        "--identity",
        "cli-test",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            if node_of(server, "p") or process.poll() is not None:
                break
            threading.Event().wait(0.05)
        assert node_of(server, "p") == "a"
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=20)[0].decode()
    assert process.returncode == 0, output
    lease = api.get_lease("kube-system", "hetsched")
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == ""  # it stepped down on SIGTERM


def test_a_waiting_pod_bound_by_someone_else_is_counted_where_it_went(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    create_node(api, node_json("a", devices=gpus("a", 1)))
    create_node(api, node_json("b", cpu="2"))
    sched = make(api)
    try:
        create_pod(api, pod_json("p", devices={"gpu": 2}))  # never fits here
        wait(sched, lambda: bool(events_for(server, "p", "FailedScheduling")))
        body = {"target": {"kind": "Node", "name": "b"}, "metadata": {"name": "p"}}
        api.core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
        wait(sched, lambda: any(j.endswith("@b") for j in sched.core.jobs))
    finally:
        sched.stop()
    assert sched.core.state.cpu_free[sched.core.state.row("b")] == 1000
    assert [b[3] for b in server.store.bindings] == [201]  # we never tried to bind it


def test_a_gang_that_loses_a_pod_before_starting_waits_for_its_minimum_again(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    create_node(api, node_json("a", devices=gpus("a", 2)))
    sched = make(api)
    group = {"labels": {POD_GROUP: "g"}, "annotations": {POD_GROUP_MIN: "3"}}
    try:
        for i in range(3):
            create_pod(api, pod_json(f"w{i}", devices={"gpu": 1}, **group))
        # 3 pods exist but only 2 GPUs: the gang is submitted and waits
        wait(sched, lambda: bool(events_for(server, "w0", "FailedScheduling")))
        api.core.delete_namespaced_pod("w2", "default")
        wait(
            sched,
            lambda: any(
                "2 of the 3 pods" in e["message"]
                for e in events_for(server, "w0", "FailedScheduling")
            ),
        )
    finally:
        sched.stop()
    assert server.store.bindings == []  # never 2 of a gang of 3
