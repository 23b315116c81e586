"""The openb experiment: trace loading and its errors, M, resampling, and small runs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builders import openb_grid_args, openb_mini_trace
from hetsched.cli.main import app
from hetsched.cluster import ClusterState
from hetsched.cluster.frag import TargetWorkload, cluster_frag
from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.job import Job
from hetsched.sim.alibaba import TraceError, TracePod, load_nodes, load_pods
from hetsched.sim.experiments.openb import (
    ALL_POLICIES,
    REPORT_POINTS,
    OpenbTrace,
    load_trace,
    policy_profile,
    run_openb,
    target_classes,
    tune_workload,
)
from hetsched.sim.experiments.openb_defrag import DefragOption, OpenbDefrag

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"


def write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def mini_trace(folder: Path) -> Path:
    """Three nodes (T4 x2, T4 x2, V100 x4) and a pod list of mixed shapes."""
    return openb_mini_trace(folder)


# -- bad files -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "line", "field"),
    [
        ((NODE_HEADER.replace(",model", ""), "n0,1000,1024,1"), 1, "model"),
        ((NODE_HEADER, "n0,-1000,1024,1,T4"), 2, "cpu_milli"),
        ((NODE_HEADER, "n0,1000,1024,1,T4", "n1,1000,lots,1,T4"), 3, "memory_mib"),
        ((NODE_HEADER, "n0,1000,1024,2,"), 2, "model"),
        ((NODE_HEADER, "n0,1000,1024,1,T4", "n0,1000,1024,1,T4"), 3, "sn"),
    ],
    ids=["missing-column", "negative", "not-a-number", "gpus-without-model", "duplicate"],
)
def test_bad_node_file(tmp_path: Path, lines: tuple[str, ...], line: int, field: str) -> None:
    path = write(tmp_path / "nodes.csv", *lines)
    with pytest.raises(TraceError) as info:
        load_nodes(path)
    assert (info.value.path, info.value.line, info.value.field) == (path, line, field)
    assert f"{path}:{line}: field {field!r}" in str(info.value)


@pytest.mark.parametrize(
    ("lines", "line", "field"),
    [
        (("name,cpu_milli,memory_mib,num_gpu", "p0,1000,1024,1"), 1, "gpu_milli"),
        ((POD_HEADER, "p0,1000,1024,1,1000,", "p1,1000,-5,0,0,"), 3, "memory_mib"),
        ((POD_HEADER, "p0,1000,1024,-1,1000,"), 2, "num_gpu"),
        ((POD_HEADER, "p0,1000,1024,1,1000,T4|A100"), 2, "gpu_spec"),
        ((POD_HEADER, "p0,1000,1024,1,1000,T4||V100"), 2, "gpu_spec"),
        ((POD_HEADER, "p0,1000,1024,2,500,"), 2, "gpu_milli"),
        ((POD_HEADER, "p0,1000,1024,1,1500,"), 2, "gpu_milli"),
        ((POD_HEADER, "p0,1000,1024,1,0,"), 2, "gpu_milli"),
    ],
    ids=[
        "missing-column",
        "negative-memory",
        "negative-gpus",
        "unknown-model",
        "empty-model",
        "share-on-two-gpus",
        "share-over-1000",
        "gpu-without-share",
    ],
)
def test_bad_pod_file(tmp_path: Path, lines: tuple[str, ...], line: int, field: str) -> None:
    path = write(tmp_path / "pods.csv", *lines)
    with pytest.raises(TraceError) as info:
        load_pods(path, models={"T4", "V100"})
    assert (info.value.path, info.value.line, info.value.field) == (path, line, field)
    assert f"{path}:{line}: field {field!r}" in str(info.value)


def test_unknown_model_names_the_model(tmp_path: Path) -> None:
    path = write(tmp_path / "pods.csv", POD_HEADER, "p0,1000,1024,1,1000,T4|A100")
    with pytest.raises(TraceError, match="unknown GPU model A100"):
        load_pods(path, models={"T4"})


def test_cli_reports_bad_trace(tmp_path: Path) -> None:
    mini_trace(tmp_path)
    write(tmp_path / "openb_pod_list_bad.csv", POD_HEADER, "p0,1000,1024,1,1000,H100")
    result = CliRunner().invoke(
        app, ["sim", "openb", "--trace-dir", str(tmp_path), "--trace", "bad", "-o", "json"]
    )
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert "openb_pod_list_bad.csv:2: field 'gpu_spec'" in message
    assert "H100" in message


def test_selector_from_gpu_spec(tmp_path: Path) -> None:
    path = write(tmp_path / "pods.csv", POD_HEADER, "p0,1000,1024,1,300,V100|T4|T4", "p1,1,0,0,0,")
    pods = load_pods(path, models={"T4", "V100"})
    choice = pods[0].request().devices[0].primary
    assert (choice.count, choice.share) == (1, 300)
    assert choice.selector == 'device.attributes["model"] in ["T4", "V100"]'
    assert pods[1].request().devices == ()


# -- the experiment's pieces ---------------------------------------------------------------


def pod(name: str, cpu: int, gpus: int, milli: int, spec: str = "") -> TracePod:
    return TracePod(name, cpu, 0, gpus, milli, spec)


def test_target_workload_95_percent_rule() -> None:
    # 20 pods: key A x12, B x5, C x2, D x1. Cumulative 12, 17, 19 (= 95 %): A, B, C kept.
    pods = (
        [pod(f"a{i}", 1000, 1, 500) for i in range(12)]
        + [pod(f"b{i}", 2000, 1, 1000) for i in range(5)]
        + [pod(f"c{i}", 1000, 0, 0) for i in range(2)]
        + [pod("d", 1000, 1, 500, "T4")]
    )
    classes = target_classes(pods)
    assert [(c.cpu_milli, c.count, c.share, c.weight) for c in classes] == [
        (1000, 1, 500, 12.0),
        (2000, 1, 1000, 5.0),
        (1000, 0, 0, 2.0),
    ]


def test_target_keeps_gpu_spec_apart() -> None:
    pods = [pod("a", 1000, 1, 500), pod("b", 1000, 1, 500, "T4")]
    classes = target_classes(pods, popularity=1.0)
    assert [c.selector for c in classes] == [None, 'device.attributes["model"] in ["T4"]']


def test_tune_grows_to_ratio_of_capacity() -> None:
    import numpy as np

    pods = [pod(f"p{i}", 1000, 1, 500 if i % 2 else 1000) for i in range(10)]  # 7.5 GPUs
    out = tune_workload(pods, 10_000, np.random.default_rng(1), 1.3)
    total = sum(p.gpu_total_milli for p in out)
    assert sorted(p.name for p in out[:10]) == sorted(p.name for p in pods)  # all originals
    assert 13_000 - 1000 < total <= 13_000
    again = tune_workload(pods, 10_000, np.random.default_rng(1), 1.3)
    assert [p.name for p in again] == [p.name for p in out]


def test_tune_shrinks_an_oversized_trace() -> None:
    import numpy as np

    pods = [pod(f"p{i}", 1000, 2, 1000) for i in range(10)]  # 20 GPUs
    out = tune_workload(pods, 10_000, np.random.default_rng(1), 1.3)
    assert sum(p.gpu_total_milli for p in out) == 12_000
    assert len({p.name for p in out}) == 6


# -- runs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_mini_run_is_sane(tmp_path: Path, policy: str) -> None:
    trace = load_trace(mini_trace(tmp_path), "mini")
    assert len(trace.nodes) == 3 and trace.gpu_capacity_milli == 8000  # CPU-only node left out
    result = run_openb(trace, policy, 42)
    curve = result.unallocated_gpu_pct
    assert len(curve) == 131
    assert curve[0] == 100.0
    assert all(0.0 <= v <= 100.0 for v in curve)
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(curve))  # never frees
    assert 0 <= result.pods_failed < result.pods_arrived
    # every idle GPU counts as fragment for a non-GPU class, so amount <= idle share
    for p in range(131):
        assert result.frag_amount_pct[p] <= curve[p] + 1e-9
    again = run_openb(trace, policy, 42)
    assert again.unallocated_gpu_pct == curve


def test_cli_single_run_json(traces: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "openb",
            "--trace-dir",
            str(traces / "alibaba-gpu-v2023"),
            "--policy",
            "fgd",
            "--seed",
            "42",
            "--limit",
            "400",
            "-o",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert list(doc) == [
        "trace",
        "policy",
        "seed",
        "unallocated_gpu_pct",
        "frag_amount_pct",
        "frag_ratio_pct",
        "pods_arrived",
        "pods_failed",
        "wall_s",
    ]
    assert (doc["trace"], doc["policy"], doc["seed"]) == ("default", "fgd", 42)
    for key in ("unallocated_gpu_pct", "frag_amount_pct", "frag_ratio_pct"):
        assert list(doc[key]) == [str(p) for p in REPORT_POINTS]
    # 400 pods request about 5 % of the 6,212 GPUs: all placed, the run stops early and
    # every later point holds the final state
    assert doc["pods_arrived"] == 400 and doc["pods_failed"] == 0
    assert 90 < doc["unallocated_gpu_pct"]["50"] == doc["unallocated_gpu_pct"]["130"] < 100
    assert 0 < doc["frag_amount_pct"]["130"] < doc["unallocated_gpu_pct"]["130"]


def test_cli_grid_writes_outputs(tmp_path: Path) -> None:
    mini_trace(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, openb_grid_args(tmp_path, out, "bestfit,fgd"))
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir())
    assert names == ["report.md", "results.csv", "unallocated_at_100.png", "unallocated_mini.png"]
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * 131
    report = (out / "report.md").read_text()
    assert "| BestFit |" in report and "| FGD |" in report


def test_empty_cluster_fragmentation_ratio(traces: Path) -> None:
    trace = load_trace(traces / "alibaba-gpu-v2023", "default")
    assert len(trace.nodes) == 1213 and trace.gpu_capacity_milli == 6_212_000
    classes = target_classes(trace.pods)
    assert len(classes) == 35
    frag = cluster_frag(ClusterState(trace.nodes), TargetWorkload.of(classes))
    assert frag.ratio_pct == pytest.approx(13.9, abs=0.1)


def test_mini_trace_is_an_openb_trace(tmp_path: Path) -> None:
    trace = load_trace(mini_trace(tmp_path), "mini")
    assert isinstance(trace, OpenbTrace) and len(trace.pods) == 25


def test_missing_file_and_empty_node_list(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nodes\.csv: no such file"):
        load_nodes(tmp_path / "nodes.csv")
    path = write(tmp_path / "nodes.csv", NODE_HEADER, "n0,1000,1024,0,")
    with pytest.raises(TraceError, match="field 'sn': no GPU nodes"):
        load_nodes(path)


def test_defragmentation_moves_a_shared_pod_to_free_a_whole_gpu(tmp_path: Path) -> None:
    """Four half-GPU pods on four T4s (one per GPU, as a spreading policy leaves them): a
    whole-GPU pod fits nowhere until one half pod moves next to another."""
    trace = load_trace(mini_trace(tmp_path), "mini")
    state = ClusterState(trace.nodes)
    framework = Framework(policy_profile("bestfit", 42, []), seed=42)
    mover = OpenbDefrag(state, framework, DefragOption(max_moved_fraction=1.0, max_moves=2))
    half = TracePod("half", 1000, 1024, 1, 500, "T4").request()
    t4s = [d for node in trace.nodes for d in node.devices if d.model == "T4"]
    for number, device in enumerate(t4s):
        name = f"half{number}"
        placement = Placement(device.id.split("/")[0], 1000, 1024, (DeviceShare(device.id, 500),))
        state.allocate(name, placement)
        mover.placed(name, Job(name, half), placement)
    whole = Job("whole", TracePod("whole", 1000, 1024, 1, 1000, "T4").request())
    assert framework.select(CycleContext(state, whole, whole.resources)) is None
    placement = mover.place("whole", whole)
    assert placement is not None and (mover.moved, mover.rescued) == (1, 1)
    state.allocate("whole", placement)  # it fits where the move left room
    # no device holds more than all of it: nothing allocated twice
    used: dict[str, int] = {}
    for held in state.allocations.values():
        for share in held.devices:
            used[share.device_id] = used.get(share.device_id, 0) + share.share
    assert max(used.values()) <= 1000 and sum(used.values()) == 4 * 500 + 1000
    # with a budget of no move, nothing moves
    assert OpenbDefrag(state, framework, DefragOption(max_moved_fraction=0.01)).budget() == 0


@pytest.mark.parametrize(
    ("fraction", "moves"), [(0.0, 4), (1.5, 4), (0.01, 0)], ids=["zero", "over-1", "no-moves"]
)
def test_defrag_option_refuses_bad_limits(fraction: float, moves: int) -> None:
    with pytest.raises(ValueError, match=r"max_moved_fraction|max_moves"):
        DefragOption(max_moved_fraction=fraction, max_moves=moves)
