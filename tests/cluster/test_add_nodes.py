"""Adding nodes in one batch: the same layout as adding them one by one, and a duplicate
name or device id refused with nothing added."""

from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.cluster import ClusterState
from hetsched.model.device import Device, Health, Node

_SHARED = MappingProxyType({"memory_gib": 80})


@st.composite
def _nodes(draw: st.DrawFn) -> list[Node]:
    """Nodes whose devices mix classes, models, health and attribute maps (one map shared
    by many devices, equal maps built apart, maps listed in another order)."""
    out: list[Node] = []
    for i in range(draw(st.integers(0, 6))):
        devices = []
        for j in range(draw(st.integers(0, 5))):
            kind = draw(st.sampled_from(["gpu/A100", "gpu/T4", "fpga/U250"]))
            cls, model = kind.split("/")
            attrs = draw(
                st.sampled_from(
                    [
                        _SHARED,
                        {"memory_gib": 80},
                        {"memory_gib": 16, "numa": 1},
                        {"numa": 1, "memory_gib": 16},
                        {},
                    ]
                )
            )
            health = draw(st.sampled_from([Health.HEALTHY, Health.HEALTHY, Health.UNHEALTHY]))
            devices.append(Device(f"n{i}/d{j}", cls, "v", model, attrs, health))
        out.append(Node(f"n{i}", 8000, 16384, tuple(devices)))
    return out


def _layout(state: ClusterState) -> dict[str, object]:
    kinds = [state.kinds[k] if k >= 0 else None for k in state.dev_kind.ravel(order="C")]
    return {
        "free": state.dev_free.tolist(),
        "healthy": state.dev_healthy.tolist(),
        "kinds": kinds,
        "total": state.dev_free_total.tolist(),
        "whole": state.dev_whole_free.tolist(),
        "devices": state.device_index,
        "nodes": state.node_index,
        "cpu": state.cpu_free.tolist(),
        "width": state.width,
    }


@settings(max_examples=150, deadline=None)
@given(_nodes(), st.integers(0, 3))
def test_a_batch_lays_out_nodes_as_one_by_one(nodes: list[Node], split: int) -> None:
    batched = ClusterState(nodes[:split])
    batched.add_nodes(nodes[split:])
    single = ClusterState()
    for node in nodes:
        single.add_node(node)
    assert _layout(batched) == _layout(single)
    for name in ("dev_kind", "dev_free", "dev_healthy"):
        assert getattr(batched, name).flags.f_contiguous


def _gpu(name: str, *ids: str) -> Node:
    return Node(name, 1000, 1024, tuple(Device(i, "gpu", "v", "A100") for i in ids))


@pytest.mark.parametrize(
    ("batch", "problem"),
    [
        ([_gpu("a", "x/0")], "node a already exists"),
        ([_gpu("b", "b/0"), _gpu("b", "b/1")], "node b already exists"),
        ([_gpu("b", "a/0")], "device id a/0 already exists"),
        ([_gpu("b", "b/0", "b/0")], "device id b/0 already exists"),
        ([_gpu("b", "b/0"), _gpu("c", "b/0")], "device id b/0 already exists"),
        # in node order: the second node's name is named before the third's device id
        ([_gpu("b", "b/0"), _gpu("c", "a/0"), _gpu("b", "z")], "device id a/0 already exists"),
        ([_gpu("b", "a/0"), _gpu("a", "z")], "device id a/0 already exists"),
    ],
)
def test_a_duplicate_adds_nothing(batch: list[Node], problem: str) -> None:
    state = ClusterState([_gpu("a", "a/0")])
    before = _layout(state)
    with pytest.raises(ValueError, match=problem):
        state.add_nodes(batch)
    assert _layout(state) == before and len(state.nodes) == 1


def test_a_removed_node_name_may_come_back() -> None:
    state = ClusterState([_gpu("a", "a/0")])
    state.remove_node("a")
    assert state.add_nodes([_gpu("a", "a/1")]) == [1]
    assert state.node_index["a"] == 1 and state.device_index["a/1"] == (1, 0)
