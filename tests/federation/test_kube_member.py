"""A Kubernetes cluster as a member: the federation's client against the API server double
(tests/k8s/apiserver.py, real HTTP on 127.0.0.1) with the hetsched scheduler serving the
federation there (``--federation-namespace``), the pods' phases set as a kubelet would."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from hetsched.federation.kube_member import JOB_LABEL, KubernetesMember
from hetsched.federation.server import FederationOptions
from hetsched.federation.testing import running_federation
from hetsched.k8s.api import for_host
from hetsched.k8s.fencing import FEDERATION_LABEL, LeaseFencing
from hetsched.k8s.scheduler import PodScheduler
from k8s.apiserver import ApiServer, gpus, node_json

NS = "hetsched-system"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_700_000_000.0 + self.t


@pytest.fixture
def server() -> Iterator[ApiServer]:
    srv = ApiServer().start()
    for_host(srv.url).core.create_node(node_json("n1", devices=gpus("n1", 2)))
    yield srv
    srv.stop()


class Running:
    """The scheduler on its own thread (as it runs in a cluster), stopped on exit."""

    def __init__(self, server: ApiServer, clock: Clock | None = None) -> None:
        self.sched = PodScheduler(for_host(server.url), watch_timeout_s=2)
        if clock is None:
            self.sched.fencing = LeaseFencing(NS, ["fed"], step_s=0.2)
        else:
            self.sched.fencing = LeaseFencing(NS, ["fed"], clock=clock.mono, wall=clock.wall)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sched.run, args=(self.stop, 0.1), daemon=True)

    def __enter__(self) -> PodScheduler:
        self.thread.start()
        return self.sched

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _wait(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _member(server: ApiServer) -> KubernetesMember:
    return KubernetesMember("k", for_host(server.url), "default", NS, "hetsched", "busybox")


def _pods(server: ApiServer, label: str, value: str) -> list[dict[str, Any]]:
    return [
        p
        for p in server.store.items("pods", "default")
        if p["metadata"].get("labels", {}).get(label) == value
    ]


BODY = {
    "name": "train",
    "command": ["python", "train.py"],
    "replicas": 2,
    "resources": {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 1}]},
    "federation": "fed",
}


def test_the_member_protocol_over_a_lease_and_pods(server: ApiServer) -> None:
    clock = Clock()
    member = _member(server)
    with Running(server, clock):
        first = member.renew("fed", 10.0, None, [])
        assert (first.renewed, first.live) == (False, False)
        nonce = _wait("a nonce", lambda: member.renew("fed", 10.0, None, []).nonce)
        second = member.renew("fed", 10.0, nonce, [])
        assert second.renewed and second.live and second.nonce != nonce
        assert second.nodes is not None and [n.name for n in second.nodes] == ["n1"]
        job_id = member.submit("fed:j1/0#1", BODY)
        assert member.submit("fed:j1/0#1", BODY) == job_id  # a retry makes no second set
        # the scheduler binds a gang's pods one by one: wait for both
        pods = _wait(
            "bound pods",
            lambda: (
                len(b := [p for p in _pods(server, JOB_LABEL, job_id) if p["spec"].get("nodeName")])
                == 2
                and b
            ),
        )
        assert len(pods) == 2 and all(
            p["metadata"]["labels"][FEDERATION_LABEL] == "fed" for p in pods
        )
        assert pods[0]["spec"]["containers"][0]["command"] == ["python", "train.py"]
        assert pods[0]["spec"]["restartPolicy"] == "Never"
        for pod in pods:
            server.store.set_phase("default", pod["metadata"]["name"], "Running")
        report = member.renew("fed", 10.0, second.nonce, [job_id])
        assert report.jobs[job_id].state == "running" and report.live_jobs == 1
        for pod in pods:
            server.store.set_phase("default", pod["metadata"]["name"], "Succeeded")
        report = member.renew("fed", 10.0, report.nonce, [job_id])
        assert report.jobs[job_id].state == "succeeded" and report.jobs[job_id].ended
        # a second job; then the federation goes silent past its lease
        other = member.submit("fed:j2/0#1", {**BODY, "replicas": 1})
        _wait(
            "bound", lambda: all(p["spec"].get("nodeName") for p in _pods(server, JOB_LABEL, other))
        )
        clock.t += 11.0
        _wait("its pods deleted", lambda: not _pods(server, JOB_LABEL, other))
        report = member.renew("fed", 10.0, report.nonce, [other])
        assert report.lapsed and report.lapses == 1 and not report.renewed
        assert report.jobs[other].ended and report.jobs[other].state == "cancelled"


def test_a_federation_runs_jobs_on_a_kubernetes_member(tmp_path: Path, server: ApiServer) -> None:
    path = tmp_path / "members.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "federation": "fed",
                "lease": "6s",
                "margin": "0.5s",
                "members": [
                    {
                        "name": "k",
                        "kind": "kubernetes",
                        "host": server.url,
                        "lease_namespace": NS,
                        "image": "busybox",
                        "labels": {"region": "lab"},
                    }
                ],
            }
        )
    )
    options = FederationOptions(members=path, home=tmp_path / "federation", rate_limit=0.0)
    with (
        Running(server),
        running_federation(options) as fed,
        httpx.Client(
            base_url=fed.url, headers={"Authorization": f"Bearer {fed.admin_token}"}, timeout=30
        ) as client,
    ):
        _wait(
            "k ready", lambda: [m["state"] for m in fed.built.runner.members_view] == ["ready"], 30
        )
        body = {k: v for k, v in BODY.items() if k != "federation"}
        job_id = client.post("/v1/jobs", json=body).json()["id"]
        _wait("running", lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "running")
        pods = _wait(
            "both pods bound",
            lambda: (
                len(
                    b := [
                        p
                        for p in _pods(server, FEDERATION_LABEL, "fed")
                        if p["spec"].get("nodeName")
                    ]
                )
                == 2
                and b
            ),
        )
        for pod in pods:
            server.store.set_phase("default", pod["metadata"]["name"], "Succeeded")
        _wait("succeeded", lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded")
        logs = client.get(f"/v1/jobs/{job_id}/logs")
        assert logs.status_code == 404 and "serves no logs" in logs.text
