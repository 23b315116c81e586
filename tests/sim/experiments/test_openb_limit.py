"""The limit of an openb run: the arrived prefix, the LP bound (valid, and exact where it
should be) and the offline packings; through the CLI with --bound."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from builders import openb_grid_args
from builders import openb_mini_trace as mini_trace
from hetsched.cli.main import app
from hetsched.model.device import SHARE_UNITS, Device, Node
from hetsched.sim.alibaba import TracePod
from hetsched.sim.experiments.openb import (
    ALL_POLICIES,
    TUNE_RATIO,
    load_trace,
    policy_profile,
    run_openb,
    target_classes,
    tune_workload,
)
from hetsched.sim.experiments.openb_bound import allocation_bound, arrived_prefix, node_types
from hetsched.sim.experiments.openb_limit import HEURISTICS, LIMIT_POINTS, offline_pack, run_limit


def node(name: str, gpus: int, cpu: int = 64_000, memory: int = 1 << 20, model: str = "T4") -> Node:
    return Node(
        name, cpu, memory, tuple(Device(f"{name}/gpu{i}", "gpu", model=model) for i in range(gpus))
    )


def pod(gpus: int, milli: int, cpu: int = 1000, memory: int = 0, spec: str = "") -> TracePod:
    return TracePod("p", cpu, memory, gpus, milli if gpus else 0, spec)


# -- the arrived prefix ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("percent", "count"),
    [
        (0, 0),  # the first pod already passes 0 %
        (39, 0),
        (40, 2),  # 400 is 40 % exactly; the GPU-less pod after it still arrives at 40 %
        (99, 2),
        (100, 4),
        (129, 4),
        (130, 5),
    ],
)
def test_arrived_prefix_table(percent: int, count: int) -> None:
    pods = [pod(1, 400), pod(0, 0), pod(1, 600), pod(0, 0), pod(1, 300)]
    assert arrived_prefix(pods, 1000, percent) == count


def test_prefix_replayed_in_order_is_the_online_run(tmp_path: Path) -> None:
    """Offering a run's arrived prefix, in arrival order, to the run's own profile gives
    exactly the run's allocation at that point: the limit and the run see the same pods."""
    trace = load_trace(mini_trace(tmp_path), "mini")
    capacity = trace.gpu_capacity_milli
    for policy, seed in itertools.product(("bestfit", "fgd", "best", "random"), (1, 2)):
        result = run_openb(trace, policy, seed)
        workload = tune_workload(trace.pods, capacity, np.random.default_rng(seed), TUNE_RATIO)
        profile = policy_profile(policy, seed, target_classes(trace.pods))
        for point in (50, 100, 130):
            pods = workload[: arrived_prefix(workload, capacity, point)]
            allocated = offline_pack(trace.nodes, pods, profile, seed)
            assert 100 - 100 * allocated / capacity == pytest.approx(
                result.unallocated_gpu_pct[point]
            )


# -- the bound -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "pods", "upper"),
    [
        ([node("a", 1)], [pod(1, 810), pod(1, 810)], 810),  # two 810 never share a GPU
        ([node("a", 2)], [pod(1, 600), pod(1, 600), pod(1, 400), pod(1, 400)], 2000),
        ([node("a", 1)], [pod(1, 470), pod(1, 470), pod(1, 50)], 990),
        # CPU and memory are relaxed: 4/3 pods of 3 CPUs fill 4 CPUs (the best packing: 500)
        ([node("a", 1, cpu=4000)], [pod(1, 500, cpu=3000), pod(1, 500, cpu=3000)], 2000 / 3),
        ([node("a", 1, memory=100)], [pod(1, 500, memory=60), pod(1, 500, memory=60)], 2500 / 3),
        ([node("a", 2, model="V100")], [pod(1, 1000, spec="T4")], 0),  # model
        ([node("a", 2)], [pod(4, 1000)], 0),  # no node has 4 GPUs
        ([node("a", 2), node("b", 2)], [pod(2, 1000), pod(2, 1000), pod(2, 1000)], 4000),
        ([node("a", 1)], [pod(0, 0, cpu=64_000), pod(1, 300)], 300),  # CPU-only pods: left out
        ([node("a", 1)], [], 0),
    ],
    ids=[
        "two-810",
        "pairs",
        "470-470-50",
        "cpu",
        "memory",
        "model",
        "too-wide",
        "multi-gpu",
        "cpu-only",
        "empty",
    ],
)
def test_bound_exact_cases(nodes: list[Node], pods: list[TracePod], upper: int) -> None:
    assert allocation_bound(nodes, pods).upper_milli == pytest.approx(upper)


def test_bound_reports_what_it_drops() -> None:
    bound = allocation_bound([node("a", 1)], [pod(1, 810), pod(1, 810)])
    assert bound.dropped == {(1000, 0, 1, 810, ()): pytest.approx(1.0)}


def test_node_types_group_alike_nodes() -> None:
    types = node_types([node("a", 2), node("b", 2), node("c", 2, cpu=8000), node("d", 4)])
    assert [(t.gpus, t.cpu_milli, t.nodes) for t in types] == [
        (2, 8000, 1),
        (2, 64_000, 2),
        (4, 64_000, 1),
    ]
    with pytest.raises(ValueError, match="one GPU model"):
        node_types(
            [
                Node(
                    "m",
                    1000,
                    1000,
                    (Device("m/0", "gpu", model="A"), Device("m/1", "gpu", model="B")),
                )
            ]
        )


def _best_packing(nodes: list[Node], pods: list[TracePod]) -> int:
    """The most GPU share any packing of a subset allocates, by exhaustive search."""
    free = [[SHARE_UNITS] * len(n.devices) for n in nodes]
    cpu = [n.cpu_milli for n in nodes]
    mem = [n.memory_mib for n in nodes]
    best = 0

    def search(i: int, total: int) -> None:
        nonlocal best
        best = max(best, total)
        if i == len(pods) or total + sum(p.gpu_total_milli for p in pods[i:]) <= best:
            return
        p = pods[i]
        for n, spec in enumerate(nodes):
            model = spec.devices[0].model if spec.devices else ""
            if (
                cpu[n] < p.cpu_milli
                or mem[n] < p.memory_mib
                or (p.models and model not in p.models)
            ):
                continue
            if p.num_gpu == 1 and p.gpu_milli < SHARE_UNITS:
                choices = [
                    [g]
                    for g in sorted(set(range(len(free[n]))), key=lambda g: g)
                    if free[n][g] >= p.gpu_milli
                ]
                seen = set()
                choices = [
                    c for c in choices if not (free[n][c[0]] in seen or seen.add(free[n][c[0]]))
                ]
            else:
                whole = [g for g, f in enumerate(free[n]) if f == SHARE_UNITS]
                choices = [whole[: p.num_gpu]] if len(whole) >= p.num_gpu else []
            for gpus in choices:
                for g in gpus:
                    free[n][g] -= p.gpu_milli
                cpu[n] -= p.cpu_milli
                mem[n] -= p.memory_mib
                search(i + 1, total + p.gpu_total_milli)
                for g in gpus:
                    free[n][g] += p.gpu_milli
                cpu[n] += p.cpu_milli
                mem[n] += p.memory_mib
        search(i + 1, total)  # dropped

    search(0, 0)
    return best


pods_strategy = st.lists(
    st.one_of(
        st.builds(
            pod,
            st.just(1),
            st.sampled_from([160, 320, 470, 500, 650, 810]),
            st.sampled_from([1000, 4000, 9000]),
            st.just(0),
            st.sampled_from(["", "", "T4", "V100"]),
        ),
        st.builds(pod, st.sampled_from([1, 2]), st.just(1000), st.sampled_from([1000, 6000])),
        st.builds(pod, st.just(0), st.just(0), st.sampled_from([2000, 12_000])),
    ),
    max_size=6,
)
nodes_strategy = st.lists(
    st.builds(
        node,
        st.just(""),
        st.integers(1, 3),
        st.sampled_from([8000, 16_000, 64_000]),
        st.just(1 << 20),
        st.sampled_from(["T4", "V100"]),
    ),
    min_size=1,
    max_size=2,
).map(
    lambda ns: [
        Node(
            f"n{i}",
            n.cpu_milli,
            n.memory_mib,
            tuple(Device(f"n{i}/gpu{j}", "gpu", model=d.model) for j, d in enumerate(n.devices)),
        )
        for i, n in enumerate(ns)
    ]
)


@settings(max_examples=80, deadline=None)
@given(nodes_strategy, pods_strategy)
def test_bound_is_at_least_the_best_packing(nodes: list[Node], pods: list[TracePod]) -> None:
    best = _best_packing(nodes, pods)
    upper = allocation_bound(nodes, pods).upper_milli
    assert upper >= best - 1e-6
    assert (
        upper
        <= min(
            sum(p.gpu_total_milli for p in pods), SHARE_UNITS * sum(len(n.devices) for n in nodes)
        )
        + 1e-6
    )


@settings(max_examples=25, deadline=None)
@given(
    nodes_strategy,
    st.lists(pods_strategy, min_size=1, max_size=4).map(
        lambda groups: [p for group in groups for p in group]
    ),
)
def test_every_packing_stays_under_the_bound(nodes: list[Node], pods: list[TracePod]) -> None:
    """Online policies in arrival order and the offline heuristics, on more pods than the
    exhaustive search can take: none allocates more than the bound allows."""
    from hetsched.cluster.frag import TargetClass

    upper = allocation_bound(nodes, pods).upper_milli
    target = [TargetClass(1000, 1, 470, None, 1.0), TargetClass(1000, 1, 1000, None, 1.0)]
    for policy in ALL_POLICIES:
        assert offline_pack(nodes, pods, policy_profile(policy, 1, target), 1) <= upper + 1e-6


def test_lp_guided_order_leaves_what_the_bound_leaves_out_for_last() -> None:
    # one GPU: the optimum keeps an 810 and the 160 (970) and leaves one 810 out; the
    # latest 810 goes last, the CPU-only pod after it
    pods = [
        TracePod("a", 1000, 0, 1, 810),
        TracePod("b", 1000, 0, 1, 810),
        TracePod("c", 1000, 0, 0, 0),
        TracePod("d", 1000, 0, 1, 160),
    ]
    nodes = [node("n", 1)]
    bound = allocation_bound(nodes, pods)
    assert bound.upper_milli == pytest.approx(970)
    order, _ = HEURISTICS["lp-guided"]
    assert [p.name for p in order(pods, bound)] == ["a", "d", "b", "c"]
    first_fit, _ = HEURISTICS["ffd"]
    assert [p.name for p in first_fit(pods, bound)] == ["a", "b", "d", "c"]


# -- the limit of a run ----------------------------------------------------------------------


def test_run_limit_on_the_mini_trace(tmp_path: Path) -> None:
    trace = load_trace(mini_trace(tmp_path), "mini")
    limit = run_limit(trace, 3)
    assert list(limit.bound_pct) == list(LIMIT_POINTS)
    for point in LIMIT_POINTS:
        per = limit.heuristics_pct[point]
        assert list(per) == list(HEURISTICS)
        assert limit.offline_pct[point] == min(per.values()) == per[limit.offline_by[point]]
        assert 0.0 <= limit.bound_pct[point] <= limit.offline_pct[point] + 1e-9
        for policy in ALL_POLICIES:  # no online run beats the bound either
            online = run_openb(trace, policy, 3).unallocated_gpu_pct[point]
            assert online >= limit.bound_pct[point] - 1e-9
            if policy == "best":  # the arrival order is one of the offline orders
                assert limit.heuristics_pct[point]["arrival-order"] == pytest.approx(online)
                assert limit.offline_pct[point] <= online + 1e-9
    doc = limit.summary()
    assert list(doc) == [
        "lower_bound_unallocated_gpu_pct",
        "offline_unallocated_gpu_pct",
        "offline_heuristic",
        "offline_heuristics_unallocated_gpu_pct",
        "wall_s",
    ]


def test_cli_single_run_with_bound(tmp_path: Path) -> None:
    mini_trace(tmp_path)
    args = ["sim", "openb", "--trace-dir", str(tmp_path), "--trace", "mini", "--policy", "best"]
    result = CliRunner().invoke(app, [*args, "--seed", "3", "--bound", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["policy"] == "best"
    bound = doc["bound"]
    assert list(bound["lower_bound_unallocated_gpu_pct"]) == ["100", "130"]
    for point in ("100", "130"):
        assert bound["lower_bound_unallocated_gpu_pct"][point] <= doc["unallocated_gpu_pct"][point]
        assert (
            bound["lower_bound_unallocated_gpu_pct"][point]
            <= bound["offline_unallocated_gpu_pct"][point]
        )
    table = CliRunner().invoke(app, [*args, "--bound"])
    assert table.exit_code == 0, table.output
    assert "lower bound" in table.output and "offline packing" in table.output
    limited = CliRunner().invoke(app, [*args, "--bound", "--limit", "5"])
    assert limited.exit_code == 2 and "--bound needs the whole run" in limited.output


def test_cli_grid_with_bound(tmp_path: Path) -> None:
    mini_trace(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, openb_grid_args(tmp_path, out, "fgd,best", "--bound"))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "limits.csv",
        "report.md",
        "results.csv",
        "unallocated_at_100.png",
        "unallocated_mini.png",
    ]
    rows = (out / "limits.csv").read_text().splitlines()
    assert len(rows) == 1 + 2  # two seeds, at 100 % arrived
    assert rows[0].startswith("trace,seed,arrived_pct,lower_bound_unallocated_gpu_pct")
    report = (out / "report.md").read_text()
    assert "| lower bound |" in report and "| offline packing (" in report and "| best |" in report


def test_cli_unknown_policy_lists_the_new_ones(tmp_path: Path) -> None:
    mini_trace(tmp_path)
    result = CliRunner().invoke(
        app, ["sim", "openb", "--trace-dir", str(tmp_path), "--trace", "mini", "--policy", "nope"]
    )
    assert result.exit_code == 2
    assert "fgdplus" in result.output and "best" in result.output
