import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from builders import cpu_node, gpu_node
from hetsched.cluster import AllocationError, ClusterState, DeviceShare, Placement
from hetsched.model.device import Health


def small_cluster() -> ClusterState:
    return ClusterState(
        [
            gpu_node("a", gpus=2, cpu=8000, memory=16384),
            gpu_node("b", gpus=4, model="T4"),
            cpu_node("c"),
        ]
    )


def test_layout_pads_device_slots() -> None:
    state = small_cluster()
    assert len(state) == 3 and state.width == 4
    assert state.dev_free.tolist() == [
        [1000, 1000, 0, 0],
        [1000, 1000, 1000, 1000],
        [0, 0, 0, 0],
    ]
    assert state.dev_kind[2].tolist() == [-1, -1, -1, -1]
    assert state.models("gpu") == ["A100", "T4"]
    assert state.device_count("gpu") == 6 and state.device_count("gpu", "T4") == 4


def test_device_mask_follows_class_selector_and_health() -> None:
    state = small_cluster()
    t4 = state.device_mask("gpu", 'device.attributes["model"] == "T4"')
    assert t4.sum() == 4 and t4[1].all()
    assert state.device_mask("fpga").sum() == 0
    state.set_device_health("b/gpu0", Health.UNHEALTHY)
    assert state.device_mask("gpu", 'device.attributes["model"] == "T4"').sum() == 3


@pytest.mark.parametrize(
    ("placement", "problem"),
    [
        (Placement("zz", 1, 1), "unknown node"),
        (Placement("a", 9000, 1), "cpu: want 9000m, free 8000m"),
        (Placement("a", 1, 20000), "memory: want 20000Mi"),
        (Placement("a", 1, 1, (DeviceShare("b/gpu0", 1000),)), "is not on node a"),
        (Placement("a", 1, 1, (DeviceShare("a/gpu0", 1001),)), "share must be 1..1000"),
        (Placement("a", 1, 1, (DeviceShare("a/gpu0", 0),)), "share must be 1..1000"),
        (
            Placement("a", 1, 1, (DeviceShare("a/gpu0", 500), DeviceShare("a/gpu0", 500))),
            "listed twice",
        ),
        (Placement("a", -1, 1), "negative"),
    ],
)
def test_refused_allocations_change_nothing(placement: Placement, problem: str) -> None:
    state = small_cluster()
    before = (state.cpu_free.copy(), state.mem_free.copy(), state.dev_free.copy())
    with pytest.raises(AllocationError, match=problem):
        state.allocate("t", placement)
    assert np.array_equal(before[0], state.cpu_free)
    assert np.array_equal(before[1], state.mem_free)
    assert np.array_equal(before[2], state.dev_free)
    assert state.allocations == {}


def test_allocate_release_roundtrip_and_double_use() -> None:
    state = small_cluster()
    p = Placement("a", 2000, 1024, (DeviceShare("a/gpu0", 600),))
    state.allocate("t1", p)
    assert state.free_share("a/gpu0") == 400
    with pytest.raises(AllocationError, match="already holds"):
        state.allocate("t1", p)
    with pytest.raises(AllocationError, match="want 600, free 400"):
        state.allocate("t2", p)
    assert state.release("t1") == p
    assert state.free_share("a/gpu0") == 1000 and state.cpu_free[0] == 8000
    with pytest.raises(AllocationError, match="holds no allocation"):
        state.release("t1")


def test_unhealthy_device_refuses_allocation() -> None:
    state = small_cluster()
    state.set_device_health("a/gpu1", Health.UNHEALTHY)
    with pytest.raises(AllocationError, match="unhealthy"):
        state.allocate("t", Placement("a", 1, 1, (DeviceShare("a/gpu1", 1000),)))


def test_fork_is_independent() -> None:
    state = small_cluster()
    state.allocate("t1", Placement("a", 1000, 1, (DeviceShare("a/gpu0", 1000),)))
    other = state.fork()
    other.release("t1")
    other.allocate("t2", Placement("b", 1000, 1))
    assert "t1" in state.allocations and "t2" not in state.allocations
    assert state.free_share("a/gpu0") == 0 and other.free_share("a/gpu0") == 1000
    assert state.cpu_free[1] == other.cpu_free[1] + 1000


def test_remove_and_add_nodes() -> None:
    state = small_cluster()
    state.allocate("t1", Placement("b", 1000, 1))
    assert state.remove_node("b") == ["t1"]
    assert not state.active[1]
    assert state.device_mask("gpu")[1].sum() == 0
    with pytest.raises(ValueError, match="already exists"):
        state.add_node(gpu_node("a"))
    with pytest.raises(ValueError, match="device id a/gpu0 already exists"):
        state.add_nodes([gpu_node("zz", gpus=1).__class__("zz", 1, 1, gpu_node("a").devices)])
    assert len(state) == 3  # a refused batch adds nothing
    row = state.add_node(gpu_node("d", gpus=8))
    assert row == 3 and state.width == 8 and state.dev_free[0, 4:].tolist() == [0] * 4


# -- properties ------------------------------------------------------------------------

NODES = [gpu_node("a", gpus=2, cpu=4000, memory=4096), gpu_node("b", gpus=4, cpu=8000, memory=8192)]
DEVICES = {n.name: [d.id for d in n.devices] for n in NODES}

placements = st.builds(
    lambda node, cpu, mem, picks: Placement(
        node,
        cpu,
        mem,
        tuple(DeviceShare(DEVICES[node][i % len(DEVICES[node])], s) for i, s in picks),
    ),
    st.sampled_from(["a", "b"]),
    st.integers(0, 5000),
    st.integers(0, 9000),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 1000)), max_size=3),
)


class AllocationMachine(RuleBasedStateMachine):
    """Random allocate/release sequences against a model of what each key holds."""

    def __init__(self) -> None:
        super().__init__()
        self.state = ClusterState(NODES)
        self.held: dict[str, Placement] = {}
        self.counter = 0

    @rule(placement=placements)
    def allocate(self, placement: Placement) -> None:
        key = f"t{self.counter}"
        self.counter += 1
        fits = self.state.check(placement) is None
        try:
            self.state.allocate(key, placement)
        except AllocationError:
            assert not fits
        else:
            assert fits
            self.held[key] = placement

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.held)))
        assert self.state.release(key) == self.held.pop(key)

    @rule()
    def release_unknown(self) -> None:
        with pytest.raises(AllocationError):
            self.state.release("never-allocated")

    @invariant()
    def capacity_is_conserved(self) -> None:
        s = self.state
        assert (s.cpu_free >= 0).all() and (s.cpu_free <= s.cpu_cap).all()
        assert (s.mem_free >= 0).all() and (s.mem_free <= s.mem_cap).all()
        assert (s.dev_free >= 0).all() and (s.dev_free <= 1000).all()
        for row, node in enumerate(s.nodes):
            used_cpu = sum(p.cpu_milli for p in self.held.values() if p.node == node.name)
            assert s.cpu_free[row] == node.cpu_milli - used_cpu
        for device_id, (row, slot) in s.device_index.items():
            used = sum(
                d.share for p in self.held.values() for d in p.devices if d.device_id == device_id
            )
            assert s.dev_free[row, slot] == 1000 - used
        # the per-node sums are kept in step with the slots
        healthy = s.dev_healthy
        assert (s.dev_free_total == np.where(healthy, s.dev_free, 0).sum(axis=1)).all()
        assert (s.dev_whole_free == ((s.dev_free >= 1000) & healthy).sum(axis=1)).all()


TestAllocationMachine = AllocationMachine.TestCase
TestAllocationMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


@settings(max_examples=60, deadline=None)
@given(st.lists(placements, max_size=20))
def test_release_all_restores_the_empty_cluster(batch: list[Placement]) -> None:
    state = ClusterState(NODES)
    empty = (state.cpu_free.copy(), state.mem_free.copy(), state.dev_free.copy())
    for i, placement in enumerate(batch):
        if state.check(placement) is None:
            state.allocate(f"t{i}", placement)
    for key in list(state.allocations):
        state.release(key)
    assert np.array_equal(state.cpu_free, empty[0])
    assert np.array_equal(state.mem_free, empty[1])
    assert np.array_equal(state.dev_free, empty[2])
