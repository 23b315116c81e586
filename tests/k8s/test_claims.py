"""ResourceClaims as the core's device requests, and back: the pure parts of the hetsched
scheduler's Dynamic Resource Allocation (inventory, plans, allocation results)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.cluster import ClusterState
from hetsched.k8s.claims.book import ClaimBook
from hetsched.k8s.claims.inventory import Inventory, core_device
from hetsched.k8s.claims.requests import ClaimError, allocated_node, allocations, plan_claim
from hetsched.k8s.dra.devices import node_slices
from hetsched.model.device import Device, Health, Node
from hetsched.model.job import Job, TaskRequest
from hetsched.scheduler import Bind, JobSubmitted, Scheduler

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
CLASSES = {
    body["metadata"]["name"]: body
    for body in yaml.safe_load_all((ROOT / "deploy/kubernetes/dra/deviceclasses.yaml").read_text())
}
DRIVER = "hetsched.io"


def gpu(node: str, i: int, model: str = "A100", numa: int = 0, healthy: bool = True) -> Device:
    health = Health.HEALTHY if healthy else Health.UNHEALTHY
    return Device(
        f"{node}/gpu{i}", "gpu", "nvidia", model, {"memory_gib": 80, "numa": numa}, health
    )


def slices(node: str, devices: list[Device], generation: int = 1) -> list[Obj]:
    return node_slices(node, DRIVER, devices, generation, shareable=("gpu",))


def claim(requests: list[Obj], **spec: Any) -> Obj:
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "spec": {"devices": {"requests": requests, **spec}},
    }


def exactly(name: str = "gpu", device_class: str = "gpu.hetsched.io", **more: Any) -> Obj:
    return {"name": name, "exactly": {"deviceClassName": device_class, **more}}


# -- the inventory --------------------------------------------------------------------------------


def test_a_device_is_seen_as_dra_selectors_read_it() -> None:
    (body,) = slices("n", [gpu("n", 0, "H100", numa=1)])
    device = core_device(DRIVER, "n", body["spec"]["devices"][0])
    assert (device.id, device.device_class, device.model) == (
        "dra:hetsched.io/n/gpu0",
        "gpu",
        "H100",
    )
    assert device.attributes["hetsched.io/numa"] == 1
    assert device.attributes["numa"] == 1  # the driver's own also by their bare names
    assert device.attributes["@driver"] == DRIVER


def test_only_the_newest_complete_generation_of_a_pool_counts() -> None:
    old = slices("n", [gpu("n", 0), gpu("n", 1)], generation=1)
    new = slices("n", [gpu("n", 0, healthy=False)], generation=2)
    inventory = Inventory.of(old + new)
    (device,) = inventory.by_node["n"]
    assert device.health is Health.UNHEALTHY
    # a pool whose newest generation is not all there yet is not used
    partial = slices("m", [gpu("m", 0)], generation=3)
    partial[0]["spec"]["pool"]["resourceSliceCount"] = 2
    assert "m" not in Inventory.of(partial).by_node
    # slices not tied to one node are not used
    shared = slices("x", [gpu("x", 0)])
    del shared[0]["spec"]["nodeName"]
    shared[0]["spec"]["allNodes"] = True
    assert Inventory.of(shared).by_node == {}


# -- plans ---------------------------------------------------------------------------------------


INVENTORY = Inventory.of(
    slices("a", [gpu("a", 0, "A100"), gpu("a", 1, "A100")])
    + slices("b", [gpu("b", i, "H100") for i in range(4)])
)


@pytest.mark.parametrize(
    ("requests", "spec", "error"),
    [
        (
            [exactly(device_class="nope.example.com")],
            {},
            "DeviceClass 'nope.example.com' does not exist",
        ),
        (
            [exactly(count=2)],
            {"constraints": [{"matchAttribute": "hetsched.io/numa"}]},
            "constraints",
        ),
        ([exactly(adminAccess=True)], {}, "adminAccess: not supported"),
        (
            [exactly(selectors=[{"cel": {"expression": "device.attributes["}}])],
            {},
            "invalid selector",
        ),
        ([exactly(device_class="fpga.hetsched.io")], {}, "no published device matches"),
        ([], {}, "spec.devices.requests is empty"),
    ],
)
def test_claims_the_scheduler_cannot_allocate_say_why(
    requests: list[Obj], spec: Obj, error: str
) -> None:
    with pytest.raises(ClaimError, match=error):
        plan_claim(claim(requests, **spec), CLASSES, INVENTORY.by_node)


def test_all_asks_for_every_matching_device_of_the_richest_node() -> None:
    plan = plan_claim(claim([exactly(allocationMode="All")]), CLASSES, INVENTORY.by_node)
    (request,) = plan.requests
    assert [c.count for c in request.request.choices] == [4]


def test_a_share_comes_from_the_class_config_and_the_claim_config_wins() -> None:
    plan = plan_claim(
        claim([exactly(device_class="shared-gpu.hetsched.io")]), CLASSES, INVENTORY.by_node
    )
    assert plan.requests[0].request.primary.share == 100  # the class's default
    config = [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"share": 250}}}]
    body = claim([exactly(device_class="shared-gpu.hetsched.io")], config=config)
    assert plan_claim(body, CLASSES, INVENTORY.by_node).requests[0].request.primary.share == 250


def test_allocated_node_reads_a_single_node_selector() -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert allocated_node({"nodeSelector": {"nodeSelectorTerms": [term]}}) == "n1"
    assert allocated_node({"nodeSelector": {"nodeSelectorTerms": [term, term]}}) is None
    assert allocated_node({}) is None


def _book_of(nodes: dict[str, list[Device]], claims: dict[str, Obj]) -> ClaimBook:
    book = ClaimBook()
    book.classes = dict(CLASSES)
    book.slices = {
        body["metadata"]["name"]: body for n, ds in nodes.items() for body in slices(n, ds)
    }
    book.refresh()
    book.claims.update(claims)
    return book


def _claiming_pod(name: str, claim_name: str = "c") -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}]},
    }


def test_a_shared_claim_waits_until_the_cache_shows_the_allocation_its_first_pod_made() -> None:
    # the binding of the first pod wrote the allocation; the watch brings it later: the other
    # pod must not plan an allocation of its own meanwhile (it would take another node's
    # device, and its write would fail for ever)
    shared = claim([exactly()])
    book = _book_of({"a": [gpu("a", 0)], "b": [gpu("b", 0)]}, {"ns/c": shared})
    assert len(book.request("ns/p1", _claiming_pod("p1"), TaskRequest()).devices) == 1
    with pytest.raises(ClaimError, match="waiting for pod ns/p1 to allocate ns/c"):
        book.request("ns/p2", _claiming_pod("p2"), TaskRequest())
    book.bound("ns/p1")
    with pytest.raises(ClaimError, match="waiting for the allocation of ns/c by ns/p1"):
        book.request("ns/p2", _claiming_pod("p2"), TaskRequest())
    # an update without the allocation yet (the finalizer first) changes nothing
    book.claim_changed("ns/c", shared)
    with pytest.raises(ClaimError, match="waiting for the allocation"):
        book.request("ns/p2", _claiming_pod("p2"), TaskRequest())
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
    allocated = {
        **shared,
        "status": {"allocation": {"nodeSelector": {"nodeSelectorTerms": [term]}}},
    }
    book.claims["ns/c"] = allocated
    book.claim_changed("ns/c", allocated)
    second = book.request("ns/p2", _claiming_pod("p2"), TaskRequest())
    assert second.devices == ()
    assert "a" in dict(second.node_selector).values()


@pytest.mark.parametrize("gone", ["claim deleted", "allocating pod gone", "claim recreated"])
def test_an_awaited_allocation_stops_holding_the_other_pods(gone: str) -> None:
    shared = claim([exactly()])
    book = _book_of({"a": [gpu("a", 0)]}, {"ns/c": shared})
    book.request("ns/p1", _claiming_pod("p1"), TaskRequest())
    book.bound("ns/p1")
    if gone == "claim deleted":
        book.claim_changed("ns/c", None)
    elif gone == "allocating pod gone":
        book.forget("ns/p1")
    else:
        book.claims["ns/c"] = {**shared, "metadata": {**shared["metadata"], "uid": "u2"}}
    assert len(book.request("ns/p2", _claiming_pod("p2"), TaskRequest()).devices) == 1


# -- the core's choices as allocations: a property -------------------------------------------------

_MODELS = ("A100", "H100", "T4")
_H100 = [{"cel": {"expression": 'device.attributes["hetsched.io"].model == "H100"'}}]


@st.composite
def _cluster_and_claims(draw: st.DrawFn) -> tuple[Inventory, list[Obj]]:
    nodes = draw(st.integers(1, 4))
    inventory_slices: list[Obj] = []
    for n in range(nodes):
        models = draw(st.lists(st.sampled_from(_MODELS), min_size=0, max_size=4))
        inventory_slices += slices(
            f"n{n}", [gpu(f"n{n}", i, m, numa=i % 2) for i, m in enumerate(models)]
        )
    claims = []
    for i in range(draw(st.integers(1, 6))):
        shape = draw(st.sampled_from(["count", "model", "first", "share"]))
        if shape == "count":
            requests = [exactly(count=draw(st.integers(1, 3)))]
            config = []
        elif shape == "model":
            model = draw(st.sampled_from(_MODELS))
            expression = f'device.attributes["hetsched.io"].model == "{model}"'
            requests = [exactly(selectors=[{"cel": {"expression": expression}}])]
            config = []
        elif shape == "first":
            requests = [
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "h100", "deviceClassName": "gpu.hetsched.io", "selectors": _H100},
                        {"name": "any-two", "deviceClassName": "gpu.hetsched.io", "count": 2},
                    ],
                }
            ]
            config = []
        else:
            requests = [exactly(device_class="shared-gpu.hetsched.io")]
            share = draw(st.integers(1, 1000))
            config = [{"opaque": {"driver": DRIVER, "parameters": {"share": share}}}]
        body = claim(requests, config=config)
        body["metadata"]["name"] = f"c{i}"
        claims.append(body)
    return Inventory.of(inventory_slices), claims


@settings(max_examples=60, deadline=None)
@given(_cluster_and_claims())
def test_every_allocation_matches_its_claim_and_no_device_is_over_given(
    case: tuple[Inventory, list[Obj]],
) -> None:
    inventory, claims = case
    nodes = [
        Node(name, 64_000, 262_144, tuple(devices)) for name, devices in inventory.by_node.items()
    ]
    core = Scheduler(ClusterState(nodes))
    devices = {d.id: d for ds in inventory.by_node.values() for d in ds}
    plans = {}
    for body in claims:
        try:
            plans[body["metadata"]["name"]] = plan_claim(body, CLASSES, inventory.by_node)
        except ClaimError:
            continue  # nothing published matches: such a pod waits
    jobs = [
        JobSubmitted(Job(name, TaskRequest(1000, 1024, plan.devices)))
        for name, plan in plans.items()
    ]
    given_share: dict[str, int] = defaultdict(int)
    for action in core.handle(jobs, 0.0):
        if not isinstance(action, Bind):
            continue
        ((_, placement),) = action.placements
        body = next(c for c in claims if c["metadata"]["name"] == action.job_id)
        plan = plans[action.job_id]
        (allocation,) = allocations(
            [(body, plan)], placement.devices, devices, inventory.origin, CLASSES, placement.node
        )
        results = allocation["devices"]["results"]
        assert len(results) == len(placement.devices)
        assert allocated_node(allocation) == placement.node
        names = {result for request in plan.requests for result in request.results}
        for result, share in zip(results, placement.devices, strict=True):
            assert result["request"] in names
            assert result["pool"] == placement.node and result["driver"] == DRIVER
            given_share[share.device_id] += share.share
        for device_id, total in given_share.items():
            assert total <= 1000, f"{device_id} given {total}"
