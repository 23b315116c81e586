"""Preemption with notice in Kubernetes: a checkpointable job's victim pod gets the
``hetsched.io/PreemptionNotice`` condition and the deadline annotation, is deleted once the
notice ends or as soon as it reports a checkpoint, and its replacement pod is bound with
where it resumes from. Against the API server double, through the official client.

What needs a kubelet (the container reading its annotations through the downward API) is
in test_e2e_real_cluster.py, skipped without a cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hetsched.framework.profile import parse_profile
from hetsched.k8s.api import KubeClusterAPI
from hetsched.k8s.checkpoints import parse_time
from hetsched.k8s.names import (
    CHECKPOINT,
    CHECKPOINT_DIR,
    CHECKPOINTED,
    NOTICE_CONDITION,
    PREEMPTION_NOTICE,
    RESUME_FROM,
    RESUME_STEP,
)
from hetsched.k8s.scheduler import PodScheduler
from hetsched.k8s.selfreport import report_checkpoint
from hetsched.model.lifecycle import JobState
from k8s.apiserver import ApiServer, gpus, node_json, pod_json
from k8s.stepping import wait

Obj = dict[str, Any]
PROFILE = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
DECLARED = '{"notice_s": "10m", "interval_s": "5m", "dir": "/ckpt"}'


class Clock:
    """The scheduler's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(api: KubeClusterAPI, clock: Clock) -> PodScheduler:
    sched = PodScheduler(api, PROFILE, watch_timeout_s=2, clock=clock)
    sched.sync()
    sched.start_watches()
    return sched


def replica(name: str, priority: int = 0, declared: str | None = DECLARED) -> Obj:
    """A pod of a ReplicaSet (so a preempted job waits for its replacement)."""
    annotations = {} if declared is None else {CHECKPOINT: declared}
    body = pod_json(name, devices={"gpu": 1}, priority=priority, annotations=annotations)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "rs",
            "uid": "rs-uid",
            "controller": True,
        }
    ]
    return body


def pod(server: ApiServer, name: str) -> Obj | None:
    return server.store.get("pods", "default", name)


def annotations(server: ApiServer, name: str) -> dict[str, str]:
    obj = pod(server, name)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def bound(server: ApiServer, name: str) -> bool:
    obj = pod(server, name)
    return obj is not None and bool(obj["spec"].get("nodeName"))


def notice_condition(server: ApiServer, name: str) -> Obj | None:
    obj = pod(server, name) or {}
    for condition in obj.get("status", {}).get("conditions") or []:
        if condition["type"] == NOTICE_CONDITION:
            return dict(condition)
    return None


def events(server: ApiServer, name: str, reason: str) -> list[Obj]:
    return [
        e
        for e in server.store.items("events", None, "")
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def preempt(server: ApiServer, api: KubeClusterAPI, sched: PodScheduler) -> str:
    """Run the checkpointable low-1 on the one GPU, then submit high: low-1 is the victim.
    The victim's job id."""
    api.core.create_namespaced_pod("default", replica("low-1"))
    wait(sched, lambda: bound(server, "low-1"))
    victim = sched.owner["default/low-1"][0]
    api.core.create_namespaced_pod("default", pod_json("high", devices={"gpu": 1}, priority=9))
    wait(sched, lambda: notice_condition(server, "low-1") is not None)
    return victim


@pytest.fixture
def cluster(server: ApiServer, api: KubeClusterAPI) -> ApiServer:
    api.core.create_node(node_json("a", devices=gpus("a", 1)))
    return server


def test_the_victim_gets_a_notice_and_is_deleted_when_it_ends(
    cluster: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = make(api, clock)
    try:
        before = datetime.now(UTC).timestamp()
        victim = preempt(cluster, api, sched)
        condition = notice_condition(cluster, "low-1")
        assert condition is not None
        assert (condition["status"], condition["reason"]) == ("True", "Preempted")
        deadline = parse_time(annotations(cluster, "low-1")[PREEMPTION_NOTICE])
        # ten minutes of notice, in wall time, rounded up to the second
        assert before + 600 <= deadline <= datetime.now(UTC).timestamp() + 601
        assert annotations(cluster, "low-1")[PREEMPTION_NOTICE] in condition["message"]
        assert events(cluster, "low-1", "PreemptionNotice")
        # inside the notice the pod runs on: stepping changes nothing
        for _ in range(5):
            sched.step(0.05)
        assert bound(cluster, "low-1") and not bound(cluster, "high")
        clock.now += 599
        sched.step(0.05)
        assert pod(cluster, "low-1") is not None
        clock.now += 2  # past the deadline
        wait(sched, lambda: pod(cluster, "low-1") is None)
        assert events(cluster, "low-1", "Preempted")
        view = sched.core.view.job(victim)
        assert view is not None and view.state is JobState.PENDING
        wait(sched, lambda: bound(cluster, "high"))
    finally:
        sched.stop()


def test_a_checkpoint_in_the_notice_ends_it_and_the_replacement_resumes(
    cluster: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = make(api, clock)
    try:
        victim = preempt(cluster, api, sched)
        clock.now += 5
        # what `hetsched checkpoint --step 7 --path /ckpt/7.npz` does in the container
        report_checkpoint(api, "default", "low-1", 7, "/ckpt/7.npz")
        wait(sched, lambda: pod(cluster, "low-1") is None)  # long before its 10 minutes
        saved = sched.core.jobs[victim].checkpoint
        assert saved is not None and (saved.step, saved.path) == (7, "/ckpt/7.npz")
        wait(sched, lambda: bound(cluster, "high"))
        # the ReplicaSet recreates its pod; it runs once high has ended, told where to resume
        api.core.create_namespaced_pod("default", replica("low-2"))
        wait(sched, lambda: sched.owner.get("default/low-2", ("",))[0] == victim)
        cluster.store.set_phase("default", "high", "Succeeded")
        wait(sched, lambda: bound(cluster, "low-2"))
        told = annotations(cluster, "low-2")
        assert told[RESUME_FROM] == "/ckpt/7.npz"
        assert told[RESUME_STEP] == "7"
        assert told[CHECKPOINT_DIR] == "/ckpt"
        view = sched.core.view.job(victim)
        assert view is not None and (view.state, view.run) == (JobState.RUNNING, 2)
    finally:
        sched.stop()


def test_a_checkpoint_while_running_is_kept_and_the_pod_runs_on(
    cluster: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = make(api, clock)
    try:
        api.core.create_namespaced_pod("default", replica("low-1"))
        wait(sched, lambda: bound(cluster, "low-1"))
        job_id = sched.owner["default/low-1"][0]
        assert annotations(cluster, "low-1")[CHECKPOINT_DIR] == "/ckpt"
        assert RESUME_FROM not in annotations(cluster, "low-1")  # a first run: from scratch
        report_checkpoint(api, "default", "low-1", 3, "/ckpt/3.npz")
        wait(sched, lambda: sched.core.jobs[job_id].checkpoint is not None)
        saved = sched.core.jobs[job_id].checkpoint
        assert saved is not None and saved.step == 3
        clock.now += 10
        report_checkpoint(api, "default", "low-1", 4, "/ckpt/4.npz")
        wait(sched, lambda: getattr(sched.core.jobs[job_id].checkpoint, "step", None) == 4)
        assert bound(cluster, "low-1") and notice_condition(cluster, "low-1") is None
    finally:
        sched.stop()


def test_a_bad_report_is_a_warning_and_changes_nothing(
    cluster: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = make(api, clock)
    try:
        victim = preempt(cluster, api, sched)
        bad = {"metadata": {"annotations": {CHECKPOINTED: '{"step": -3}'}}}
        api.patch_pod("default", "low-1", bad)
        wait(sched, lambda: bool(events(cluster, "low-1", "BadCheckpointReport")))
        message = events(cluster, "low-1", "BadCheckpointReport")[0]["message"]
        assert "step must be a whole number >= 0" in message
        assert pod(cluster, "low-1") is not None and sched.core.jobs[victim].checkpoint is None
    finally:
        sched.stop()


def test_a_pod_that_ends_inside_its_notice_is_deleted_at_once(
    cluster: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = make(api, clock)
    try:
        preempt(cluster, api, sched)
        cluster.store.set_phase("default", "low-1", "Failed")
        wait(sched, lambda: pod(cluster, "low-1") is None)
        wait(sched, lambda: bound(cluster, "high"))
    finally:
        sched.stop()


def test_a_victim_that_declares_nothing_is_deleted_without_notice(
    cluster: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = make(api, clock)
    try:
        api.core.create_namespaced_pod("default", replica("low-1", declared=None))
        wait(sched, lambda: bound(cluster, "low-1"))
        api.core.create_namespaced_pod("default", pod_json("high", devices={"gpu": 1}, priority=9))
        wait(sched, lambda: pod(cluster, "low-1") is None)
        assert not events(cluster, "low-1", "PreemptionNotice")
    finally:
        sched.stop()


def test_a_bad_declaration_is_not_scheduled_and_says_why(
    cluster: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = make(api, clock)
    try:
        api.core.create_namespaced_pod("default", replica("low-1", declared="{signal: SIGKILL}"))
        wait(sched, lambda: bool(events(cluster, "low-1", "FailedScheduling")))
        message = events(cluster, "low-1", "FailedScheduling")[0]["message"]
        assert f"annotation {CHECKPOINT}: signal: SIGKILL cannot be caught" in message
        assert not bound(cluster, "low-1")
    finally:
        sched.stop()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HETSCHED_", "POD_"))}
    clean.pop("KUBERNETES_SERVICE_HOST", None)
    command = [str(Path(sys.executable).parent / "hetsched"), "checkpoint", *args]
    return subprocess.run(
        command, env={**clean, **env}, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_cli_in_a_pod_writes_the_report_on_its_own_pod(
    cluster: ApiServer, api: KubeClusterAPI, tmp_path: Path
) -> None:
    api.core.create_namespaced_pod("default", replica("low-1"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": cluster.url}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    env = {"POD_NAME": "low-1", "POD_NAMESPACE": "default", "KUBECONFIG": str(kubeconfig)}
    done = _cli(env, "--step", "12", "--path", "/ckpt/12.npz", "-o", "json")
    assert done.returncode == 0, done.stderr
    written = json.loads(done.stdout)
    assert written["pod"] == "default/low-1"
    value = json.loads(annotations(cluster, "low-1")[CHECKPOINTED])
    assert (value["step"], value["path"]) == (12, "/ckpt/12.npz")
    assert abs(parse_time(value["time"]) - datetime.now(UTC).timestamp()) < 3600
    # a pod that does not exist: the API's answer, and a failure
    missing = _cli({**env, "POD_NAME": "nobody"}, "--step", "1")
    assert missing.returncode == 1 and "not written on pod default/nobody" in missing.stderr


def test_the_cli_outside_any_task_or_pod_says_what_is_missing() -> None:
    done = _cli({}, "--step", "1")
    assert done.returncode == 2
    assert "POD_NAME" in done.stderr and "HETSCHED_TASK_TOKEN" in done.stderr


def test_a_restarted_scheduler_withdraws_the_notices_it_no_longer_holds(
    cluster: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    first = make(api, clock)
    try:
        preempt(cluster, api, first)
    finally:
        first.stop()
    # the preemptor is gone meanwhile: nothing needs the room any more
    api.core.delete_namespaced_pod("high", "default")
    second = make(api, Clock())
    try:
        wait(second, lambda: PREEMPTION_NOTICE not in annotations(cluster, "low-1"))
        condition = notice_condition(cluster, "low-1")
        assert condition is not None
        assert (condition["status"], condition["reason"]) == ("False", "Withdrawn")
        for _ in range(5):
            second.step(0.05)
        assert bound(cluster, "low-1")  # it runs on
    finally:
        second.stop()


def test_a_moved_job_gets_its_notice_and_its_recreated_pod_binds_where_it_moved(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    """Defragmentation moves the checkpointable low-1 off node a so that a two-GPU job fits
    there: low-1 gets its notice (reason Migrating), reports, is deleted, and the pod its
    ReplicaSet recreates is bound on b, told where to resume."""
    profile = parse_profile(
        {
            "queue_sort": "priority",
            "migration": {"min_runtime_s": 0, "defrag": {"enabled": True, "min_interval_s": 0}},
        }
    )
    api.core.create_node(node_json("a", devices=gpus("a", 2)))
    clock = Clock()
    sched = PodScheduler(api, profile, watch_timeout_s=2, clock=clock)
    sched.sync()
    sched.start_watches()
    try:
        api.core.create_namespaced_pod("default", replica("low-1"))
        wait(sched, lambda: bound(server, "low-1"))
        victim = sched.owner["default/low-1"][0]
        api.core.create_node(node_json("b", devices=gpus("b", 2), labels={"pool": "b"}))
        pinned = pod_json("pinned", devices={"gpu": 1})
        pinned["spec"]["nodeSelector"] = {"pool": "b"}
        api.core.create_namespaced_pod("default", pinned)
        wait(sched, lambda: bound(server, "pinned"))
        clock.now += 1
        api.core.create_namespaced_pod("default", pod_json("wide", devices={"gpu": 2}))
        wait(sched, lambda: notice_condition(server, "low-1") is not None)
        condition = notice_condition(server, "low-1")
        assert condition is not None and condition["reason"] == "Migrating"
        report_checkpoint(api, "default", "low-1", 9, "/ckpt/9.npz")
        wait(sched, lambda: pod(server, "low-1") is None)
        api.core.create_namespaced_pod("default", replica("low-2"))
        wait(sched, lambda: bound(server, "low-2") and bound(server, "wide"))
        assert pod(server, "low-2")["spec"]["nodeName"] == "b"  # type: ignore[index]
        assert pod(server, "wide")["spec"]["nodeName"] == "a"  # type: ignore[index]
        assert annotations(server, "low-2")[RESUME_STEP] == "9"
        view = sched.core.view.job(victim)
        assert view is not None and (view.state, view.run) == (JobState.RUNNING, 2)
        assert sched.owner["default/low-2"] == (victim, 0)
    finally:
        sched.stop()


def test_a_checkpointable_bare_pod_is_never_moved_and_the_waiting_pod_is_told_why(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    """As above, but low-1 is a bare pod: once deleted nothing would recreate it, so moving
    it would end its job. It is not a candidate: it keeps running, gets no notice, and the
    two-GPU pod's FailedScheduling event says why defragmentation moved nothing."""
    profile = parse_profile(
        {
            "queue_sort": "priority",
            "migration": {"min_runtime_s": 0, "defrag": {"enabled": True, "min_interval_s": 0}},
        }
    )
    api.core.create_node(node_json("a", devices=gpus("a", 2)))
    clock = Clock()
    sched = PodScheduler(api, profile, watch_timeout_s=2, clock=clock)
    sched.sync()
    sched.start_watches()
    try:
        bare = pod_json("low-1", devices={"gpu": 1}, annotations={CHECKPOINT: DECLARED})
        api.core.create_namespaced_pod("default", bare)
        wait(sched, lambda: bound(server, "low-1"))
        victim = sched.owner["default/low-1"][0]
        api.core.create_node(node_json("b", devices=gpus("b", 2), labels={"pool": "b"}))
        pinned = pod_json("pinned", devices={"gpu": 1})
        pinned["spec"]["nodeSelector"] = {"pool": "b"}
        api.core.create_namespaced_pod("default", pinned)
        wait(sched, lambda: bound(server, "pinned"))
        clock.now += 1
        api.core.create_namespaced_pod("default", pod_json("wide", devices={"gpu": 2}))
        wait(
            sched,
            lambda: any(
                "no controller recreates" in e["message"]
                for e in events(server, "wide", "FailedScheduling")
            ),
        )
        assert notice_condition(server, "low-1") is None
        assert PREEMPTION_NOTICE not in annotations(server, "low-1")
        assert bound(server, "low-1") and not bound(server, "wide")
        view = sched.core.view.job(victim)
        assert view is not None and (view.state, view.run) == (JobState.RUNNING, 1)
        # once the bare pod ends on its own, the wide one gets node a
        sched.step()
        obj = pod(server, "low-1")
        assert obj is not None
        obj["status"]["phase"] = "Succeeded"
        api.core.replace_namespaced_pod_status("low-1", "default", obj)
        wait(sched, lambda: bound(server, "wide"))
        assert pod(server, "wide")["spec"]["nodeName"] == "a"  # type: ignore[index]
    finally:
        sched.stop()
