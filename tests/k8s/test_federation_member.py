"""The hetsched scheduler as a federation's member: pods labelled with a federation run only
while its Lease is live, and are deleted when it lapses (through the official client
against the API server double, over real HTTP on 127.0.0.1).

The lease's clock is a hand-moved one; the scheduler's steps are bounded in number.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hetsched.k8s.api import KubeClusterAPI, for_host
from hetsched.k8s.fencing import ANNOTATIONS, FEDERATION_LABEL, LeaseFencing, lease_name
from hetsched.k8s.scheduler import PodScheduler
from k8s.apiserver import ApiServer, gpus, node_json, pod_json
from k8s.test_scheduler import create_node, create_pod, events_for, node_of, wait

NS = "hetsched-system"
LEASE_S = 10


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_700_000_000.0 + self.t


@pytest.fixture
def api(server: ApiServer) -> Iterator[KubeClusterAPI]:
    client = for_host(server.url)
    create_node(client, node_json("n1", devices=gpus("n1", 2)))
    yield client
    client.close()


def scheduler(api: KubeClusterAPI, clock: Clock) -> PodScheduler:
    sched = PodScheduler(api, watch_timeout_s=2)
    sched.fencing = LeaseFencing(NS, ["fed"], clock=clock.mono, wall=clock.wall)
    sched.sync()
    sched.start_watches()
    return sched


def notes(server: ApiServer) -> dict[str, str]:
    lease = server.store.get("leases", NS, lease_name("fed"))
    assert lease is not None
    return dict(lease["metadata"].get("annotations") or {})


def renew(api: KubeClusterAPI) -> bool:
    """The federation's side, by hand: create the lease, or renew the nonce it carries."""
    lease = api.get_lease(NS, lease_name("fed"))
    if lease is None:
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease_name("fed"), "namespace": NS},
            "spec": {"holderIdentity": "fed", "leaseDurationSeconds": LEASE_S},
        }
        return api.create_lease(NS, body) is not None
    nonce = (lease["metadata"].get("annotations") or {}).get(ANNOTATIONS["nonce"])
    if nonce is None:
        return False
    lease["metadata"]["annotations"][ANNOTATIONS["renew"]] = nonce
    lease["spec"]["leaseDurationSeconds"] = LEASE_S
    return api.replace_lease(NS, lease_name("fed"), lease) is not None


def federated(name: str) -> dict[str, Any]:
    return pod_json(name, devices={"gpu": 1}, labels={FEDERATION_LABEL: "fed"})


def establish(sched: PodScheduler, api: KubeClusterAPI, server: ApiServer) -> None:
    renew(api)
    wait(sched, lambda: ANNOTATIONS["nonce"] in notes(server))
    renew(api)
    wait(sched, lambda: sched.fencing is not None and sched.fencing.live("fed"))


def test_a_federated_pod_waits_for_a_live_lease(server: ApiServer, api: KubeClusterAPI) -> None:
    clock = Clock()
    sched = scheduler(api, clock)
    try:
        create_pod(api, federated("f1"))
        create_pod(api, pod_json("plain", devices={"gpu": 1}))
        wait(sched, lambda: node_of(server, "plain") == "n1")
        wait(sched, lambda: bool(events_for(server, "f1", "FailedScheduling")))
        assert node_of(server, "f1") == ""
        message = events_for(server, "f1", "FailedScheduling")[-1]["message"]
        assert "waiting for a live lease of federation fed" in message
        establish(sched, api, server)
        wait(sched, lambda: node_of(server, "f1") == "n1")
        assert notes(server)[ANNOTATIONS["lapses"]] == "0"
    finally:
        sched.stop()


def test_a_lapse_deletes_the_federations_pods_and_holds_renewals(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = scheduler(api, clock)
    try:
        create_pod(api, pod_json("plain", devices={"gpu": 1}))
        establish(sched, api, server)
        create_pod(api, federated("f1"))
        wait(sched, lambda: node_of(server, "f1") == "n1")
        # the federation goes silent: live to the end of the lease, then lapsed
        clock.t += LEASE_S - 1
        sched.step(0.1)
        assert sched.fencing is not None and sched.fencing.live("fed")
        assert node_of(server, "f1") == "n1"
        clock.t += 2
        wait(sched, lambda: server.store.get("pods", "default", "f1") is None)
        assert server.store.get("pods", "default", "plain") is not None
        assert events_for(server, "f1", "Fenced")
        wait(sched, lambda: notes(server).get(ANNOTATIONS["lapsed"]) == "true")
        assert notes(server)[ANNOTATIONS["lapses"]] == "1"
        # nothing of the old lease left: the federation renews the fresh nonce again
        renew(api)
        wait(sched, lambda: sched.fencing is not None and sched.fencing.live("fed"))
        wait(sched, lambda: notes(server).get(ANNOTATIONS["lapsed"]) == "false")
    finally:
        sched.stop()


def test_a_restarted_scheduler_fences_after_the_written_expiry(
    server: ApiServer, api: KubeClusterAPI
) -> None:
    clock = Clock()
    sched = scheduler(api, clock)
    try:
        establish(sched, api, server)
        create_pod(api, federated("f1"))
        wait(sched, lambda: node_of(server, "f1") == "n1")
    finally:
        sched.stop()
    # the scheduler is gone for longer than the lease; a new one resumes from the object
    clock.t += LEASE_S + 5
    again = scheduler(api, clock)
    try:
        wait(again, lambda: server.store.get("pods", "default", "f1") is None)
        assert notes(server)[ANNOTATIONS["lapses"]] == "1"
    finally:
        again.stop()
