"""Stranded accelerators: the measure, its incremental meter, the score and the report."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cpu_node, gpu_node, job
from hetsched.cluster import ClusterState, DeviceShare, Placement
from hetsched.cluster.stranding import (
    StrandingMeter,
    Typical,
    node_needs,
    stranded_accelerators,
    stranded_count,
)
from hetsched.framework import CycleContext
from hetsched.framework.profile import ProfileError, parse_profile
from hetsched.model.device import Health
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.plugins.fit import Fit
from hetsched.plugins.stranding import _PYTHON_ROWS, Stranding, StrandingArgs
from hetsched.sim.engine import Simulator
from hetsched.sim.metrics import summarize
from hetsched.sim.workload import Workload, WorkloadJob


@pytest.mark.parametrize(
    ("free", "cpu", "mem", "need_cpu", "need_mem", "stranded"),
    [
        (4, 32_000, 256, 8_000, 64, 0),  # exactly enough for all four
        (4, 16_000, 256, 8_000, 64, 2),  # CPU feeds two of four
        (4, 32_000, 100, 8_000, 64, 3),  # memory feeds one
        (2, 0, 0, 8_000, 64, 2),  # nothing left: both stranded
        (2, -4_000, 64, 8_000, 64, 2),  # overcommitted CPU feeds nothing
        (3, 0, 0, 0, 0, 0),  # no need: never stranded
        (0, 0, 0, 8_000, 64, 0),  # nothing free, nothing stranded
    ],
)
def test_stranded_count(
    free: int, cpu: int, mem: int, need_cpu: int, need_mem: int, stranded: int
) -> None:
    assert int(stranded_count(free, cpu, mem, need_cpu, need_mem)) == stranded


def _gpus(node: str, first: int, count: int) -> tuple[DeviceShare, ...]:
    return tuple(DeviceShare(f"{node}/gpu{i}", 1000) for i in range(first, first + count))


def test_report_after_allocations() -> None:
    # 4 GPUs, 32 cores, 128 GiB: each GPU needs 8 cores and 32 GiB (proportional share)
    state = ClusterState(
        [
            gpu_node("g", gpus=4, cpu=32_000, memory=128 * 1024),
            gpu_node("h", gpus=4, cpu=32_000, memory=128 * 1024),
            cpu_node("c"),
        ]
    )
    need_cpu, need_mem = node_needs(state)
    assert list(need_cpu) == [8000, 8000, 0] and list(need_mem) == [32 * 1024, 32 * 1024, 0]
    # a 1-GPU task that took 20 cores leaves 12 cores for three free GPUs: two stranded
    state.allocate("a/0", Placement("g", 20_000, 8 * 1024, _gpus("g", 0, 1)))
    # a CPU-only task on h takes 30 of its 32 cores: all four GPUs stranded
    state.allocate("b/0", Placement("h", 30_000, 8 * 1024))
    report = stranded_accelerators(state)
    assert (report.stranded, report.accelerators, report.free) == (6, 8, 7)
    assert report.by_node == {"g": 2, "h": 4}
    assert report.to_dict()["percent"] == 75.0
    # a typical job that needs 2 cores: g feeds its three, h one of four
    light = stranded_accelerators(state, {"gpu": Typical(2_000, 8 * 1024)})
    assert light.by_node == {"h": 3}
    # a class/model entry wins over the class entry
    exact = stranded_accelerators(
        state, {"gpu": Typical(2_000, 1024), "gpu/A100": Typical(16_000, 1024)}
    )
    assert exact.by_node == {"g": 3, "h": 4}
    state.release("b/0")
    assert stranded_accelerators(state).by_node == {"g": 2}


def test_unhealthy_and_removed_nodes_do_not_count() -> None:
    state = ClusterState([gpu_node("g", gpus=4, cpu=32_000, memory=128 * 1024)])
    state.allocate("a/0", Placement("g", 30_000, 0))
    assert stranded_accelerators(state).stranded == 4
    state.set_device_health("g/gpu0", Health.UNHEALTHY)
    report = stranded_accelerators(state)
    assert (report.stranded, report.accelerators) == (3, 3)
    state.remove_node("g")
    assert stranded_accelerators(state).accelerators == 0
    assert stranded_accelerators(state).fraction == 0.0


_steps = st.lists(
    st.tuples(
        st.sampled_from(["g", "h", "c"]),
        st.integers(0, 40_000),
        st.integers(0, 200 * 1024),
        st.integers(0, 4),
        st.booleans(),
    ),
    max_size=25,
)


def _small_cluster(idle: int = 0) -> ClusterState:
    """A 4-GPU A100 node, an 8-GPU V100 node, a CPU node, and ``idle`` small GPU nodes."""
    return ClusterState(
        [
            gpu_node("g", gpus=4, cpu=32_000, memory=128 * 1024),
            gpu_node("h", gpus=8, cpu=64_000, memory=256 * 1024, model="V100"),
            cpu_node("c"),
            *(gpu_node(f"idle{i}", gpus=2, cpu=8_000, memory=64 * 1024) for i in range(idle)),
        ]
    )


def _place_step(
    state: ClusterState, index: int, step: tuple[str, int, int, int, bool]
) -> str | None:
    """Allocate a drawn step (its first device whole, the others 40 %) where it fits; the
    allocation's key, or None when it did not fit."""
    node, cpu, mem, gpus, _ = step
    row = state.row(node)
    slots = [s for s in range(state.width) if state.dev_free[row, s] == 1000][:gpus]
    shares = [DeviceShare(state.device_id(row, s), 1000 if k else 400) for k, s in enumerate(slots)]
    placement = Placement(node, cpu, mem, tuple(shares))
    if state.check(placement) is not None:
        return None
    state.allocate(f"j{index}/0", placement)
    return f"j{index}/0"


@settings(max_examples=80, deadline=None)
@given(_steps)
def test_meter_matches_the_pure_measure(steps: list[tuple[str, int, int, int, bool]]) -> None:
    """After any sequence of allocations and releases the incremental meter and the
    vectorized measure agree, node for node."""
    nodes = [
        gpu_node("g", gpus=4, cpu=32_000, memory=128 * 1024),
        gpu_node("h", gpus=8, cpu=64_000, memory=256 * 1024, model="V100"),
        cpu_node("c"),
    ]
    typical = {"gpu/V100": Typical(4_000, 16 * 1024)}
    state = ClusterState(nodes)
    meter = StrandingMeter(nodes, typical)
    held: list[str] = []
    for index, (node, cpu, mem, gpus, release) in enumerate(steps):
        if release and held:
            key = held.pop(0)
            meter.use(state.release(key), -1)
            continue
        row = state.row(node)
        free_slots = [s for s in range(state.width) if state.dev_free[row, s] == 1000]
        devices = tuple(DeviceShare(state.device_id(row, s), 1000) for s in free_slots[:gpus])
        placement = Placement(node, cpu, mem, devices)
        if state.check(placement) is None:
            key = f"j{index}/0"
            state.allocate(key, placement)
            meter.use(placement, +1)
            held.append(key)
    report = stranded_accelerators(state, typical)
    assert meter.stranded == report.stranded
    assert meter.accelerators == report.accelerators == 12
    assert meter.fraction == pytest.approx(report.fraction)


def _scores(state: ClusterState, request: TaskRequest, args: StrandingArgs | None = None) -> dict:
    ctx = CycleContext(state, Job("j", request), request)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    values = Stranding(args or StrandingArgs()).score(ctx, rows)
    return {state.nodes[int(r)].name: float(v) for r, v in zip(rows, values, strict=True)}


def test_score_keeps_cpu_work_off_accelerator_nodes() -> None:
    state = ClusterState([gpu_node("gpu", gpus=8, cpu=64_000, memory=512 * 1024), cpu_node("cpu")])
    # proportional share: each GPU needs 8 cores, so 4 cores taken strand one GPU of 8
    small = TaskRequest(4_000, 8 * 1024)
    assert _scores(state, small) == {"gpu": 100 - 100 / 8 - 60, "cpu": 100.0}
    # a typical GPU job needs 4 cores: the same task strands nothing, still pays the penalty
    light = StrandingArgs(typical={"gpu": {"cpu": "4", "memory": "8Gi"}})
    assert _scores(state, small, light) == {"gpu": 40.0, "cpu": 100.0}
    big = TaskRequest(60_000, 8 * 1024)  # 4 cores left for 8 GPUs: 7 stranded
    assert _scores(state, big, light) == {"gpu": 0.0, "cpu": 100.0}
    no_penalty = StrandingArgs(typical=light.typical, cpu_only_penalty=0)
    assert _scores(state, small, no_penalty) == {"gpu": 100.0, "cpu": 100.0}


def test_score_prefers_the_node_a_gpu_task_strands_nothing_on() -> None:
    state = ClusterState(
        [
            gpu_node("tight", gpus=4, cpu=32_000, memory=128 * 1024),
            gpu_node("roomy", gpus=4, cpu=64_000, memory=128 * 1024),
        ]
    )
    args = StrandingArgs(typical={"gpu": {"cpu": "8", "memory": "1Gi"}})
    state.allocate("x/0", Placement("tight", 8_000, 0, _gpus("tight", 0, 1)))
    # tight: 3 free GPUs, 24 cores; a 1-GPU 12-core task leaves 2 GPUs with 12 cores: one
    # of them stranded (1 of the 4 most any node has: -25); roomy keeps 52 cores for 3
    request = TaskRequest(12_000, 1024, (DeviceRequest.of("gpu", 1),))
    assert _scores(state, request, args) == {"tight": 75.0, "roomy": 100.0}
    # a task at the typical need strands nothing anywhere: the score stays out of the way
    typical = TaskRequest(8_000, 1024, (DeviceRequest.of("gpu", 1),))
    assert _scores(state, typical, args) == {"tight": 100.0, "roomy": 100.0}


def test_score_args_fail_at_profile_load() -> None:
    with pytest.raises(ProfileError, match=r"score\[1\]\.args\.cpu_only_penalty"):
        parse_profile(
            {"score": ["bestfit", {"name": "stranding", "args": {"cpu_only_penalty": 101}}]}
        )
    with pytest.raises(ProfileError, match=r"score\[0\]\.args\.typical\.gpu\.cpu"):
        parse_profile(
            {"score": [{"name": "stranding", "args": {"typical": {"gpu": {"cpu": "x"}}}}]}
        )
    spec = parse_profile(
        {
            "score": [
                {
                    "name": "stranding",
                    "args": {"typical": {"gpu/A100": {"cpu": "8", "memory": "64Gi"}}},
                }
            ]
        }
    )
    assert StrandingArgs.model_validate(spec.score[0].args).typicals() == {
        "gpu/A100": Typical(8000, 64 * 1024)
    }


def test_replay_reports_stranded_accelerators() -> None:
    """CPU-heavy work next to idle GPUs shows in the report; the sample series is kept."""
    nodes = [gpu_node("g", gpus=4, cpu=32_000, memory=128 * 1024)]
    items = (
        WorkloadJob(job("cpu-hog", cpu=30_000, submit_time=0), 100.0),
        WorkloadJob(job("gpu", cpu=1_000, gpus=1, submit_time=100), 100.0),
    )
    result = Simulator(nodes, Workload(items)).run()
    assert len(result.series.stranded) == len(result.series.time)
    assert result.series.stranded[0] == 1.0  # all four GPUs starved while the hog runs
    summary = summarize(result)
    assert 0.0 < summary.stranded <= 1.0
    assert summary.to_dict()["stranded_accelerators"] == summary.stranded


_requests = st.tuples(
    st.integers(0, 40_000),
    st.integers(0, 64 * 1024),
    st.sampled_from([(), ("whole", 1), ("whole", 2), ("share", 300), ("alt", 0)]),
)


def _unpruned(state: ClusterState, request: TaskRequest, args: StrandingArgs) -> dict:
    """The score's definition evaluated on every feasible node, without the headroom
    bound that lets the plugin skip most of them."""
    from hetsched.plugins.stranding import _taken

    ctx = CycleContext(state, Job("j", request), request)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    need_cpu, need_mem = node_needs(state, args.typicals())
    free = state.dev_whole_free[rows]
    cpu, mem = state.cpu_free[rows], state.mem_free[rows]
    before = stranded_count(free, cpu, mem, need_cpu[rows], need_mem[rows])
    after = stranded_count(
        np.maximum(free - _taken(ctx, rows), 0),
        cpu - request.cpu_milli,
        mem - request.memory_mib,
        need_cpu[rows],
        need_mem[rows],
    )
    counts = (state.dev_healthy & (state.dev_kind >= 0)).sum(axis=1)
    score = 100.0 - 100.0 * np.maximum(after - before, 0) / max(int(counts.max()), 1)
    if not request.devices:
        score -= np.where(counts[rows] > 0, args.cpu_only_penalty, 0.0)
    score = np.clip(score, 0, 100)
    return {state.nodes[int(r)].name: float(v) for r, v in zip(rows, score, strict=True)}


@settings(max_examples=120, deadline=None)
@given(_steps, st.lists(_requests, min_size=1, max_size=4), st.booleans())
def test_score_bound_never_changes_a_score(
    steps: list[tuple[str, int, int, int, bool]],
    requests: list[tuple[int, int, tuple[object, ...]]],
    typical: bool,
) -> None:
    """The headroom bound only skips nodes whose score is 100 anyway: on any cluster state
    the plugin gives every node the score of the unpruned definition. One plugin scores
    several requests while the state changes, so its cache is exercised too."""
    state = _small_cluster()
    args = StrandingArgs(typical={"gpu": {"cpu": "6", "memory": "16Gi"}} if typical else {})
    plugin = Stranding(args)
    for index, step in enumerate(steps):
        _place_step(state, index, step)
        for cpu_r, mem_r, kind in requests:
            devices: tuple[DeviceRequest, ...] = ()
            if kind and kind[0] == "whole":
                devices = (DeviceRequest.of("gpu", int(str(kind[1]))),)
            elif kind and kind[0] == "share":
                devices = (DeviceRequest.of("gpu", 1, 300),)
            elif kind:
                devices = (
                    DeviceRequest(
                        (
                            DeviceRequest.of(
                                "gpu", 1, selector='device.attributes["model"] == "V100"'
                            ).primary,
                            DeviceRequest.of("gpu", 1, 500).primary,
                        )
                    ),
                )
            request = TaskRequest(cpu_r, mem_r, devices)
            ctx = CycleContext(state, Job("j", request), request)
            rows = np.flatnonzero(Fit().filter(ctx, state.active))
            got = plugin.score(ctx, rows)
            names = [state.nodes[int(r)].name for r in rows]
            assert dict(zip(names, got.tolist(), strict=True)) == pytest.approx(
                _unpruned(state, request, args)
            )


@settings(max_examples=80, deadline=None)
@given(_steps, st.lists(_requests, min_size=1, max_size=4), st.booleans())
def test_score_of_one_row_is_bit_identical_to_the_same_row_among_many(
    steps: list[tuple[str, int, int, int, bool]],
    requests: list[tuple[int, int, tuple[object, ...]]],
    typical: bool,
) -> None:
    """A few rows are scored in plain Python (the request-class cache rescores the few
    nodes that changed), many with numpy: the same floats, bit for bit, on any state and
    request. Idle nodes make the cluster large enough for the numpy path."""
    state = _small_cluster(idle=16)
    args = StrandingArgs(typical={"gpu": {"cpu": "6", "memory": "16Gi"}} if typical else {})
    plugin = Stranding(args)
    for index, step in enumerate(steps):
        _place_step(state, index, step)
        for cpu_r, mem_r, kind in requests:
            devices: tuple[DeviceRequest, ...] = ()
            if kind and kind[0] == "whole":
                devices = (DeviceRequest.of("gpu", int(str(kind[1]))),)
            elif kind:
                devices = (DeviceRequest.of("gpu", 1, 300),)
            request = TaskRequest(cpu_r, mem_r, devices)
            ctx = CycleContext(state, Job("j", request), request)
            rows = np.arange(len(state))
            many = plugin.score(ctx, rows).tolist()
            assert rows.size > _PYTHON_ROWS
            one = [plugin.score(ctx, rows[i : i + 1]).tolist()[0] for i in range(rows.size)]
            assert [v.hex() for v in one] == [v.hex() for v in many]
            few = plugin.score(ctx, rows[:3]).tolist()
            assert [v.hex() for v in few] == [v.hex() for v in many[:3]]


@settings(max_examples=80, deadline=None)
@given(_steps, st.booleans())
def test_headroom_kept_row_by_row_is_bit_identical_to_a_fresh_pass(
    steps: list[tuple[str, int, int, int, bool]], release: bool
) -> None:
    """The headroom is refreshed on the few rows allocations changed in plain Python,
    and computed over every row with numpy: after any allocations (and releases), the
    kept values are the fresh ones, bit for bit."""
    from hetsched.plugins.stranding import _Headroom

    state = _small_cluster()
    need_cpu, need_mem = node_needs(state, {})
    need_cpu, need_mem = np.maximum(need_cpu, 1e-9), np.maximum(need_mem, 1e-9)
    kept = _Headroom()
    kept.sync(state, need_cpu, need_mem)
    held: list[str] = []
    for index, step in enumerate(steps):
        key = _place_step(state, index, step)
        if key is not None:
            held.append(key)
        if release and held and index % 3 == 2:
            state.release(held.pop(0))
        kept.sync(state, need_cpu, need_mem)
        fresh = _Headroom()
        fresh.sync(state, need_cpu, need_mem)
        assert [v.hex() for v in kept.cpu.tolist()] == [v.hex() for v in fresh.cpu.tolist()]
        assert [v.hex() for v in kept.mem.tolist()] == [v.hex() for v in fresh.mem.tolist()]
