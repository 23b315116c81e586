"""The fragmentation measure on small clusters worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node
from hetsched.cluster import ClusterState, DeviceShare, Placement
from hetsched.cluster.frag import (
    TargetClass,
    TargetWorkload,
    cluster_frag,
    eligibility,
    expected_frag,
    expected_frag_after_share,
    node_frag,
)
from hetsched.sim.alibaba import model_selector

ONLY_B = model_selector(["B"])


def two_gpu_node() -> ClusterState:
    """One node, model A, 2 GPUs, 8 CPUs: GPU 0 free, GPU 1 with 300 of 1000 free."""
    state = ClusterState([gpu_node("a", gpus=2, model="A", cpu=8_000)])
    state.allocate("x", Placement("a", 0, 0, (DeviceShare("a/gpu1", 700),)))
    return state


def frag_of(state: ClusterState, classes: list[TargetClass]) -> np.ndarray:
    target = TargetWorkload.of(classes)
    slots = state.device_mask("gpu")
    elig = eligibility(state, target, "gpu")
    return node_frag(state.cpu_free, state.dev_free, slots, elig, target)


# (what the case shows, class, F of node "a" in milli-GPU)
CASES = [
    ("non-GPU task: all idle GPU counts", TargetClass(1000, 0, 0, None, 1), 1300),
    ("non-GPU task that cannot fit either", TargetClass(9000, 0, 0, None, 1), 1300),
    ("share 500 fits: only GPUs with g < 500", TargetClass(1000, 1, 500, None, 1), 300),
    ("share 200 fits on both GPUs: nothing", TargetClass(1000, 1, 200, None, 1), 0),
    ("share 300 fits on g == 300 too", TargetClass(1000, 1, 300, None, 1), 0),
    ("one whole GPU fits: the partial GPU", TargetClass(1000, 1, 1000, None, 1), 300),
    ("two whole GPUs cannot host: all idle", TargetClass(1000, 2, 1000, None, 1), 1300),
    ("model mismatch: all idle", TargetClass(1000, 1, 500, ONLY_B, 1), 1300),
    ("CPU short: all idle", TargetClass(9000, 1, 500, None, 1), 1300),
]


@pytest.mark.parametrize(("case", "target", "expected"), CASES, ids=[c[0] for c in CASES])
def test_node_frag_per_class(case: str, target: TargetClass, expected: int) -> None:
    assert frag_of(two_gpu_node(), [target])[0, 0] == expected


def test_expected_frag_weights_by_popularity() -> None:
    # share 500 (F 300) three times as popular as a non-GPU task (F 1300): 0.75*300 + 0.25*1300
    state = two_gpu_node()
    target = TargetWorkload.of(
        [TargetClass(1000, 1, 500, None, 3), TargetClass(1000, 0, 0, None, 1)]
    )
    slots = state.device_mask("gpu")
    value = expected_frag(
        state.cpu_free, state.dev_free, slots, eligibility(state, target, "gpu"), target
    )
    assert value.tolist() == [pytest.approx(550.0)]


def test_cluster_amount_and_ratio() -> None:
    # node a: F 300 of idle 1300 (share 500); node b (model B, 4 idle GPUs): F 0 of 4000;
    # node c (model A, CPU all taken): cannot host, F 1000 of 1000
    state = ClusterState(
        [
            gpu_node("a", gpus=2, model="A", cpu=8_000),
            gpu_node("b", gpus=4, model="B", cpu=8_000),
            gpu_node("c", gpus=1, model="A", cpu=8_000),
        ]
    )
    state.allocate("x", Placement("a", 0, 0, (DeviceShare("a/gpu1", 700),)))
    state.allocate("y", Placement("c", 8_000, 0))
    frag = cluster_frag(state, TargetWorkload.of([TargetClass(1000, 1, 500, None, 1)]))
    assert (frag.frag_milli, frag.idle_milli, frag.capacity_milli) == (1300, 6300, 7000)
    assert frag.amount_pct == pytest.approx(100 * 1300 / 7000)
    assert frag.ratio_pct == pytest.approx(100 * 1300 / 6300)


def test_selector_restricts_devices_on_mixed_node() -> None:
    # a node with one A and one B GPU, both free: a share task for B only fits, and the
    # A GPU's idle share is fragment for it (it can never use it)
    from hetsched.model.device import Device, Node

    node = Node(
        "m", 8_000, 1024, (Device("m/0", "gpu", model="A"), Device("m/1", "gpu", model="B"))
    )
    state = ClusterState([node])
    assert frag_of(state, [TargetClass(1000, 1, 500, ONLY_B, 1)])[0, 0] == 1000


def test_what_if_axes_broadcast() -> None:
    # the same node evaluated under three hypothetical free vectors at once
    state = two_gpu_node()
    target = TargetWorkload.of([TargetClass(1000, 1, 500, None, 1)])
    elig = eligibility(state, target, "gpu")
    free = np.array([[[1000, 300], [500, 300], [1000, 0]]])  # (node, what-if, slot)
    cpu = np.full((1, 3), 8_000)
    slots = state.device_mask("gpu")[:, None, :]
    values = expected_frag(cpu, free, slots, elig[:, :, None, :], target)
    assert values.tolist() == [[300.0, 300.0, 0.0]]


@pytest.mark.parametrize(
    "bad",
    [
        dict(cpu_milli=-1, count=0, share=0),
        dict(cpu_milli=0, count=1, share=1001),
        dict(cpu_milli=0, count=1, share=0),
    ],
)
def test_target_class_validation(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        TargetClass(selector=None, weight=1, **bad)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from([0, 50, 190, 300, 470, 530, 1000]), min_size=1, max_size=4),
        min_size=1,
        max_size=4,
    ),
    st.lists(st.integers(0, 16), min_size=4, max_size=4),
    st.sampled_from([50, 160, 320, 470, 650]),
    st.integers(0, 8),
)
def test_frag_after_share_equals_every_what_if(
    frees: list[list[int]], cpus: list[int], share: int, cpu: int
) -> None:
    """The per-slot shortcut gives exactly what re-measuring each what-if state gives."""
    nodes = [
        gpu_node(f"n{i}", gpus=len(f), model="AB"[i % 2], cpu=16_000) for i, f in enumerate(frees)
    ]
    state = ClusterState(nodes)
    for i, (node, free) in enumerate(zip(nodes, frees, strict=False)):
        devices = tuple(
            DeviceShare(d.id, 1000 - f) for d, f in zip(node.devices, free, strict=True) if f < 1000
        )
        state.allocate(f"x{i}", Placement(node.name, 1000 * cpus[i], 0, devices))
    target = TargetWorkload.of(
        [
            TargetClass(2000, 1, 470, None, 3),
            TargetClass(4000, 1, 1000, ONLY_B, 2),
            TargetClass(1000, 2, 1000, None, 1),
            TargetClass(8000, 0, 0, None, 1),
            TargetClass(1000, 1, 160, None, 1),
        ]
    )
    slots = state.device_mask("gpu")
    elig = eligibility(state, target, "gpu")
    free = state.dev_free.astype(np.int64)
    width = free.shape[1]
    cpu_after = state.cpu_free - 1000 * cpu
    what_if = free[:, None, :] - share * np.eye(width, dtype=np.int64)[None]
    slow = expected_frag(
        np.broadcast_to(cpu_after[:, None], (len(state), width)),
        what_if,
        slots[:, None, :],
        elig[:, :, None, :],
        target,
    )
    fast = expected_frag_after_share(cpu_after, free, slots, elig, target, share)
    room = slots & (free >= share)
    assert fast[room].tolist() == slow[room].tolist()
