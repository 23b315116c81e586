"""fgdplus: its three terms by hand, and with them switched off it is FGD exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node
from hetsched.cluster import ClusterState, DeviceShare, Placement
from hetsched.cluster.frag import TargetClass, TargetWorkload
from hetsched.framework import CycleContext
from hetsched.framework.registry import installed
from hetsched.model.device import Device, Node
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.plugins.fgd import FGD, FGDArgs
from hetsched.plugins.fgdplus import (
    FGDPlus,
    FGDPlusArgs,
    gap_values,
    kind_pressure,
    stranded,
)
from hetsched.plugins.fit import Fit
from hetsched.sim.alibaba import model_selector


def classes(*items: tuple[int, int, int, float]) -> list[dict[str, object]]:
    """(cpu_milli, count, share, weight) -> target class args."""
    return [
        {"cpu_milli": cpu, "count": count, "share": share, "weight": weight}
        for cpu, count, share, weight in items
    ]


def workload(*items: tuple[int, int, int, float]) -> TargetWorkload:
    return TargetWorkload.of(TargetClass(c, k, s, None, w) for c, k, s, w in items)


def share(cpu: int, milli: int, selector: str | None = None) -> TaskRequest:
    return TaskRequest(cpu, 0, (DeviceRequest.of("gpu", 1, milli, selector),))


def plugin(target: list[dict[str, object]], **args: object) -> FGDPlus:
    return FGDPlus(FGDPlusArgs(target=target, **args))  # type: ignore[arg-type]


def scores(scorer: object, request: TaskRequest, state: ClusterState) -> dict[str, float]:
    ctx = CycleContext(state, Job("j", request), request)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    values = scorer.score(ctx, rows)  # type: ignore[attr-defined]
    return {state.nodes[int(r)].name: float(v) for r, v in zip(rows, values, strict=True)}


# -- V: the eventual waste of a gap ----------------------------------------------------------


def test_gap_values_by_hand() -> None:
    # one class, share 600. g < 600: nothing fits; with patience p the gap ends as waste
    # with probability 1 - p each time and waits otherwise: V(g) = (1 - p) g / (1 - p) = g.
    # g >= 600: the class fits; V(g) = V(g - 600).
    target = workload((0, 1, 600, 1.0))
    values = gap_values(target, np.array([True]), 0.5)
    assert values[0] == 0.0
    assert values[599] == pytest.approx(599.0)
    assert values[1000] == pytest.approx(400.0)  # 600 fits, leaves 400, nothing fits that
    assert values[700] == pytest.approx(100.0)


def test_gap_values_mix_and_patience() -> None:
    # classes 500 (p 0.5) and whole (p 0.5). g = 500: 500 fits (p .5 -> V(0) = 0), whole
    # misses (m = .5): V = (0 + .5 (1 - q) 500) / (1 - .5 q)
    target = workload((0, 1, 500, 1.0), (0, 1, 1000, 1.0))
    for q in (0.0, 0.5, 0.9):
        values = gap_values(target, np.array([True, True]), q)
        assert values[500] == pytest.approx(0.5 * (1 - q) * 500 / (1 - 0.5 * q))
        # g = 1000: both fit; V = .5 V(500) + .5 V(0)
        assert values[1000] == pytest.approx(0.5 * values[500])


def test_gap_values_without_eligible_classes() -> None:
    target = workload((0, 1, 500, 1.0), (4000, 0, 0, 1.0))
    values = gap_values(target, np.array([False, True]), 0.7)  # only the CPU-only class
    assert values.tolist() == list(range(1001))


@pytest.mark.parametrize(
    ("idle", "cpu", "per_milli", "expected"),
    [
        (8000, 96_000, 12.0, 0.0),  # 8 GPUs, 96 CPUs, 12 CPUs per GPU: balanced
        (8000, 48_000, 12.0, 4000.0),  # half the CPU: half the idle share is stranded
        (0, 0, 12.0, 0.0),
        (500, 0, 12.0, 500.0),  # no CPU left: all idle share stranded
    ],
)
def test_stranded_table(idle: int, cpu: int, per_milli: float, expected: float) -> None:
    got = stranded(np.array([idle], np.float64), np.array([cpu], np.float64), per_milli)
    assert got.tolist() == [expected]


# -- terms in placement ----------------------------------------------------------------------


def two_nodes() -> ClusterState:
    """a: 1 GPU holding 470 (530 free); b: 1 GPU holding 320 (680 free). 64 CPUs each."""
    state = ClusterState([gpu_node("a", gpus=1), gpu_node("b", gpus=1)])
    state.allocate("x", Placement("a", 0, 0, (DeviceShare("a/gpu0", 470),)))
    state.allocate("y", Placement("b", 0, 0, (DeviceShare("b/gpu0", 320),)))
    return state


def test_gap_term_prefers_the_gap_that_ends_well() -> None:
    # Target: shares 470 (p .2) and 160 (p .8). A 470 share on a leaves 60, dead for both
    # classes: FGD's delta +60. On b it leaves 210, a fragment only for the 470 class:
    # +.2 * 210 = +42. FGD prefers b. Over the gap's future (patience 0), 210 is mostly
    # filled by a 160 and then dead at 50: V(210) = 82 against V(680) = 107.344, while a's
    # gap falls from V(530) = 123.68 to V(60) = 60: with the gap term a (60 - 63.68) beats
    # b (42 - 25.344).
    target = classes((0, 1, 470, 1.0), (0, 1, 160, 4.0))
    state = two_nodes()
    request = share(0, 470)
    fgd = FGD(FGDArgs(target=target, score="smooth"))  # type: ignore[arg-type]
    ctx = CycleContext(state, Job("j", request), request)
    assert fgd.delta(ctx, np.arange(2)).tolist() == pytest.approx([60.0, 42.0])
    plus = plugin(target, cpu_weight=0, gap_weight=1, score="smooth", gap_patience=0.0)
    got = scores(plus, request, state)
    expected = {"a": -3.68, "b": 16.656}
    assert got == pytest.approx({n: 100 / (1 + np.exp(d / 1000)) for n, d in expected.items()})


def test_cpu_term_keeps_cpu_hungry_tasks_on_cpu_rich_nodes() -> None:
    # lean: 8 GPUs, 32 CPUs; rich: 8 GPUs, 256 CPUs; the target's tasks need 4 CPUs per
    # GPU. A whole-GPU task asking 16 CPUs strands GPUs on lean (32 - 16 = 16 CPUs serve
    # only 4 of the 7 idle GPUs) and none on rich.
    state = ClusterState(
        [gpu_node("lean", gpus=8, cpu=32_000), gpu_node("rich", gpus=8, cpu=256_000)]
    )
    target = classes((4000, 1, 1000, 1.0))
    request = TaskRequest(16_000, 0, (DeviceRequest.of("gpu", 1),))
    off = scores(plugin(target, cpu_weight=0, gap_weight=0, score="smooth"), request, state)
    on = scores(plugin(target, cpu_weight=1, gap_weight=0, score="smooth"), request, state)
    assert off["lean"] == pytest.approx(off["rich"])  # FGD sees no difference
    assert on["rich"] > on["lean"]


def lean_and_rich() -> ClusterState:
    """16 GPUs and 288 CPUs: 18 milli-CPU per milli-unit of GPU share."""
    return ClusterState(
        [gpu_node("lean", gpus=8, cpu=32_000), gpu_node("rich", gpus=8, cpu=256_000)]
    )


@pytest.mark.parametrize(
    ("cpu_only", "binds"),
    [
        # the GPU class asks 4 milli-CPU per milli-GPU; a CPU-only class of equal weight
        # adds its CPU: (4,000 + x) / 1,000 against the cluster's 18
        (0, False),
        (13_999, False),  # 17.999 < 18
        (14_000, True),  # 18: as much CPU per GPU as the cluster has
        (16_000, True),  # 20
    ],
)
def test_cpu_binds_where_the_workload_asks_the_clusters_cpu_per_gpu(
    cpu_only: int, binds: bool
) -> None:
    target = classes((4000, 1, 1000, 1.0), (cpu_only, 0, 0, 1.0))
    request = TaskRequest(16_000, 0, (DeviceRequest.of("gpu", 1),))
    state = lean_and_rich()
    plus = plugin(target, cpu_weight=1, gap_weight=0, score="smooth")
    fgd = FGD(FGDArgs(target=target, score="smooth"))  # type: ignore[arg-type]
    got, plain = scores(plus, request, state), scores(fgd, request, state)
    assert plus.cpu_binds is binds
    if binds:
        assert got == plain  # FGD's score alone
    else:
        assert got["rich"] > got["lean"]  # the CPU term at work, as above


def test_keep_keeps_the_terms_where_cpu_binds() -> None:
    target = classes((4000, 1, 1000, 1.0), (16_000, 0, 0, 1.0))
    request = TaskRequest(16_000, 0, (DeviceRequest.of("gpu", 1),))
    plus = plugin(target, cpu_weight=1, gap_weight=0, score="smooth", when_cpu_binds="keep")
    got = scores(plus, request, lean_and_rich())
    assert plus.cpu_binds is False
    assert got["rich"] > got["lean"]


def model_cluster() -> ClusterState:
    def node(name: str, model: str) -> Node:
        return Node(name, 64_000, 1 << 20, (Device(f"{name}/gpu0", "gpu", model=model),))

    return ClusterState([node("t4", "T4"), node("g2", "G2"), node("g2b", "G2")])


def test_kind_pressure_by_hand() -> None:
    # T4-only demand 2 of 4 units, free demand 2; capacity 1 T4, 2 G2 (3 in all): scaled,
    # T4-only needs 1.5 GPUs of the 1 T4 -> 1 (capped); G2 is nobody's only choice -> 0
    state = model_cluster()
    target = TargetWorkload.of(
        [
            TargetClass(0, 1, 1000, model_selector(["T4"]), 2.0),
            TargetClass(0, 1, 1000, None, 2.0),
        ]
    )
    pressure = kind_pressure(state, target, "gpu")
    by_model = {k.model: float(pressure[i]) for i, k in enumerate(state.kinds)}
    assert by_model == {"T4": 1.0, "G2": 0.0}
    assert pressure[-1] == 0.0  # absent slots


def test_reserve_term_keeps_free_tasks_off_scarce_models() -> None:
    state = model_cluster()
    target = classes((0, 1, 1000, 2.0), (0, 1, 1000, 2.0))
    target[0]["selector"] = model_selector(["T4"])
    whole = TaskRequest(0, 0, (DeviceRequest.of("gpu", 1),))
    got = scores(plugin(target, reserve_weight=1, score="smooth"), whole, state)
    assert got["g2"] > got["t4"]
    # a T4-only task pays nothing: T4 is the least pressed kind it may use
    t4 = TaskRequest(0, 0, (DeviceRequest.of("gpu", 1, 1000, model_selector(["T4"])),))
    only = scores(plugin(target, reserve_weight=1, score="smooth"), t4, state)
    plain = scores(plugin(target, reserve_weight=0, score="smooth"), t4, state)
    assert only == plain


# -- with the terms off it is FGD --------------------------------------------------------------


@st.composite
def states(draw: st.DrawFn) -> ClusterState:
    """A few nodes of 1-4 GPUs and 8-64 CPUs, with random shares and CPU taken."""
    count = draw(st.integers(1, 5))
    nodes = [
        gpu_node(f"n{i}", gpus=draw(st.integers(1, 4)), cpu=1000 * draw(st.integers(8, 64)))
        for i in range(count)
    ]
    state = ClusterState(nodes)
    for i, node in enumerate(nodes):
        for j, device in enumerate(node.devices):
            taken = draw(st.sampled_from([0, 0, 160, 320, 470, 810, 1000]))
            cpu = draw(st.integers(0, 1)) * 1000  # leaves room for the test's own 1000
            if taken:
                state.allocate(
                    f"t{i}-{j}", Placement(node.name, cpu, 0, ((DeviceShare(device.id, taken)),))
                )
    return state


TARGET = classes((1000, 1, 470, 5.0), (2000, 1, 810, 4.0), (3000, 1, 1000, 6.0), (4000, 0, 0, 1.0))
REQUESTS = [
    share(1000, 470),
    share(2000, 320),
    TaskRequest(3000, 0, (DeviceRequest.of("gpu", 1),)),
    TaskRequest(4000, 0),
    TaskRequest(1000, 0, (DeviceRequest.of("gpu", 2),)),
]


@settings(max_examples=60, deadline=None)
@given(states(), st.sampled_from(REQUESTS), st.sampled_from(["truncated", "smooth"]))
def test_without_its_terms_it_is_fgd(state: ClusterState, request: TaskRequest, score: str) -> None:
    fgd = FGD(FGDArgs(target=TARGET, score=score))  # type: ignore[arg-type]
    plus = plugin(TARGET, cpu_weight=0, gap_weight=0, reserve_weight=0, score=score)
    ctx = CycleContext(state, Job("j", request), request)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    assert fgd.score(ctx, rows).tolist() == plus.score(ctx, rows).tolist()
    for row in rows.tolist():
        assert fgd.choose_devices(ctx, row) == plus.choose_devices(ctx, row)


@settings(max_examples=40, deadline=None)
@given(states(), st.sampled_from(REQUESTS))
def test_chosen_device_has_room_and_cache_follows_changes(
    state: ClusterState, request: TaskRequest
) -> None:
    scorer = plugin(TARGET)
    ctx = CycleContext(state, Job("j", request), request)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    first = scorer.score(ctx, rows)
    for row in rows.tolist():
        chosen = scorer.choose_devices(ctx, row)
        if chosen is not None:
            (device,) = chosen
            assert state.free_share(device.device_id) >= device.share
    # a change behind the plugin's back is seen: same scores as a fresh plugin
    if rows.size:
        node = state.nodes[int(rows[0])]
        state.allocate("late", Placement(node.name, 1000, 0, ()))
        fresh = plugin(TARGET)
        assert scorer.score(ctx, rows).tolist() == fresh.score(ctx, rows).tolist()
        state.release("late")
        assert scorer.score(ctx, rows).tolist() == first.tolist()


def test_registered_as_fgdplus_and_best() -> None:
    assert installed().lookup("fgdplus").factory is FGDPlus
    best = installed().lookup("best")
    assert issubclass(best.factory, FGDPlus)  # type: ignore[arg-type]
    assert best.args_model is FGDPlusArgs


def test_set_target_rescores() -> None:
    state = two_nodes()
    request = share(0, 470)
    scorer = plugin(classes((0, 1, 470, 1.0)), score="smooth")
    before = scores(scorer, request, state)
    scorer.set_target(workload((0, 1, 1000, 1.0)))
    after = scores(scorer, request, state)
    fresh = scores(plugin(classes((0, 1, 1000, 1.0)), score="smooth"), request, state)
    assert after == fresh != before
