"""Network domains: the tree from node labels, and free capacity per domain kept as
allocations come and go equal to summing the nodes afresh."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node
from hetsched.cluster import ClusterState
from hetsched.cluster.network import Network, fit_count
from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.model.device import Health
from hetsched.model.job import DeviceRequest, TaskRequest

LEVELS = ("block", "rack")


def _cluster() -> ClusterState:
    """b0: r0 = n0, n1; r1 = n2; b1: r0 = n3 (another r0: a rack of its own), n4 (no rack)."""
    where = [("b0", "r0"), ("b0", "r0"), ("b0", "r1"), ("b1", "r0"), ("b1", None)]
    nodes = [
        gpu_node(f"n{i}", gpus=4, labels={"block": b} | ({"rack": r} if r else {}))
        for i, (b, r) in enumerate(where)
    ]
    state = ClusterState(nodes)
    state.set_topology(LEVELS)
    return state


def test_tree_nests_racks_of_one_name_in_their_blocks() -> None:
    net = _cluster().network()
    assert net is not None
    assert net.names == [["b0", "b1"], ["r0", "r1", "r0", "n4"]]
    assert net.parent[1].tolist() == [0, 0, 1, 1]
    assert net.of[1].tolist() == [0, 0, 1, 2, 3]
    assert net.members(1, 0).tolist() == [0, 1]
    assert net.kids(0, 1).tolist() == [2, 3]
    assert net.kids(-1, 0).tolist() == [0, 1]
    assert net.ancestors(2, 0).tolist() == [0, 0, 0, 1, 1]  # hosts up to blocks
    assert net.ancestors(2, 2).tolist() == [0, 1, 2, 3, 4]
    assert net.ancestors(1, -1).tolist() == [0, 0, 0, 0]


def test_capacity_counts_whole_device_tasks_per_node() -> None:
    state = _cluster()
    net = state.network()
    assert net is not None
    three = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 3),))
    # 4 free GPUs per node hold one 3-GPU task each: racks r0 (2 nodes) 2, r1 1, ...
    assert net.capacity(state, 1, three).tolist() == [2, 1, 1, 1]
    # a bound from above for counts other than 1, 2, 4, 8: b0's 12 GPUs over 3 (3 fit)
    assert net.capacity(state, 0, three).tolist() == [4, 2]
    four = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 4),))
    assert net.capacity(state, 0, four).tolist() == [3, 2]
    half = TaskRequest(0, 0, (DeviceRequest.of("gpu", 1, 500),))
    assert net.capacity(state, 0, half).tolist() == [24, 16]


def _sums(state: ClusterState, net: Network) -> list[np.ndarray]:
    fresh = Network(net.levels, state.nodes)
    fresh.sync(state)
    return fresh.free


def test_capacity_when_empty_counts_healthy_devices_only() -> None:
    state = _cluster()
    net = state.network()
    assert net is not None
    state.allocate("k", Placement("n0", 1000, 1024, (DeviceShare("n0/gpu0", 1000),)))
    state.set_device_health("n1/gpu0", Health.UNHEALTHY)
    four = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 4),))
    # now: r0 has n0 (3 free) and n1 (3 healthy): none; empty: n0 holds one, n1 none
    assert net.capacity(state, 1, four).tolist() == [0, 1, 1, 1]
    assert net.capacity_empty(state, 1, four).tolist() == [1, 1, 1, 1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(1, 1000), st.booleans()),
        max_size=30,
    )
)
def test_incremental_capacity_equals_summing_afresh(
    steps: list[tuple[int, int, int, bool]],
) -> None:
    state = _cluster()
    net = state.network()
    assert net is not None
    net.sync(state)
    held: list[str] = []
    for i, (row, slot, share, release) in enumerate(steps):
        if release and held:
            state.release(held.pop(0))
        elif i % 7 == 6:
            state.set_device_health(f"n{row}/gpu{slot}", Health.UNHEALTHY)
        else:
            placement = Placement(f"n{row}", 500, 256, (DeviceShare(f"n{row}/gpu{slot}", share),))
            if state.check(placement) is None:
                state.allocate(f"k{i}", placement)
                held.append(f"k{i}")
        fork = state.fork()
        forked = fork.network()
        assert forked is not None
        forked.sync(fork)
        net.sync(state)
        for kept, fresh, copied in zip(net.free, _sums(state, net), forked.free, strict=True):
            assert np.array_equal(kept, fresh)
            assert np.array_equal(copied, fresh)
    assert fit_count(net.free[0], TaskRequest()).min() > 1 << 30


def test_relabelled_or_added_nodes_rebuild_the_tree_and_keep_capacity() -> None:
    state = _cluster()
    state.allocate("k", Placement("n4", 0, 0, (DeviceShare("n4/gpu0", 1000),)))
    state.update_node("n4", labels={"block": "b1", "rack": "r0"})  # joins n3's rack
    state.add_node(gpu_node("n5", gpus=4, labels={"block": "b2", "rack": "r9"}))
    net = state.network()
    assert net is not None
    assert net.names == [["b0", "b1", "b2"], ["r0", "r1", "r0", "r9"]]
    one = TaskRequest(0, 0, (DeviceRequest.of("gpu", 1),))
    # racks: b0/r0 8, b0/r1 4, b1/r0 (n3 4 + n4 3) 7, b2/r9 4
    assert net.capacity(state, 1, one).tolist() == [8, 4, 7, 4]
