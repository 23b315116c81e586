"""Trace loaders (Gavel, Philly runtimes) and the synthetic generator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from builders import TRACES, gpu_node
from hetsched.sim.gavel import GavelOptions, load_throughputs, read_gavel
from hetsched.sim.philly import PHILLY_QUANTILES, RuntimeDistribution, load_runtimes
from hetsched.sim.synthetic import (
    SyntheticSpec,
    generate,
    gpus_per_node,
    rate_for_load,
    split_gang,
    synthetic_cluster,
)
from hetsched.sim.workload import WorkloadError

GAVEL = TRACES / "gavel"
needs_gavel = pytest.mark.skipif(
    not (GAVEL / "msr_seed0").is_dir(), reason="Gavel traces not present (../shared/traces)"
)
needs_philly = pytest.mark.skipif(
    not (TRACES / "philly" / "philly_runtime.csv").is_file(),
    reason="Philly runtimes not present (../shared/traces)",
)

# a tiny throughput table in Gavel's layout
TABLE = {
    "v100": {
        "('ResNet-50 (batch size 64)', 1)": {"null": 2.0, "('A3C', 1)": [1.0, 1.0]},
        "('ResNet-50 (batch size 64)', 8)": {"null": 12.0},
        "('A3C', 1)": {"null": 5.0},
    }
}


def write_table(tmp_path: Path) -> Path:
    path = tmp_path / "simulation_throughputs.json"
    path.write_text(json.dumps(TABLE), encoding="utf-8")
    return path


def test_throughputs_keep_the_isolated_rate(tmp_path: Path) -> None:
    table = load_throughputs(write_table(tmp_path))
    assert table["v100"] == {
        ("ResNet-50 (batch size 64)", 1): 2.0,
        ("ResNet-50 (batch size 64)", 8): 12.0,
        ("A3C", 1): 5.0,
    }


def test_gavel_lines_to_jobs(tmp_path: Path) -> None:
    trace = tmp_path / "vc1.trace"
    rows = [
        # 7 fields: type, command, steps arg, data dir, steps, arrival, gpus
        "ResNet-50 (batch size 64)\tpython x\t-n\t1\t100\t5.5\t1",
        "ResNet-50 (batch size 64)\tpython x\t-n\t1\t1200\t0\t16",
        "A3C\tpython y\t-n\t1\t100\t7\t4",  # no 4-GPU entry: linear from 1 GPU
        "Unknown\tpython z\t-n\t1\t100\t8\t1",
    ]
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    table = load_throughputs(write_table(tmp_path))
    workload, skipped = read_gavel([trace], table, GavelOptions(gpus_per_node=8))
    assert skipped == {"no v100 throughput for ('Unknown', 1)": 1}
    first, second, third = workload.jobs
    assert (first.job.id, first.job.submit_time, first.job.replicas) == ("vc1-2", 0.0, 2)
    assert first.job.resources.devices[0].primary.count == 8
    assert first.duration_s == 1200 / (12.0 * 16 / 8)
    assert (second.job.id, second.duration_s, second.job.user, second.job.queue) == (
        "vc1-1",
        50.0,
        "vc1",
        "vc1",
    )
    assert (third.job.resources.devices[0].primary.count, third.duration_s) == (4, 100 / 20.0)
    # each job carries its speed model: type, steps, rate per worker type at its size
    assert first.job.speed.job_type == "ResNet-50 (batch size 64)"
    assert first.job.speed.work == 1200
    assert dict(first.job.speed.rates) == {"v100": 12.0 * 16 / 8}


def test_gavel_scale_factor_zero_is_skipped(tmp_path: Path) -> None:
    trace = tmp_path / "old.trace"
    trace.write_text("A3C\tcmd\t-n\t1\t100\t0\t0\nA3C\tcmd\t-n\t1\t100\t3\t1\n")
    workload, skipped = read_gavel([trace], load_throughputs(write_table(tmp_path)))
    assert len(workload) == 1 and skipped == {"scale_factor 0 (skip)": 1}


def test_gavel_bad_lines_name_file_line_and_field(tmp_path: Path) -> None:
    trace = tmp_path / "bad.trace"
    rows = [
        "A3C\tcmd\t-n\t1\t100\t0\t1",
        "A3C\tcmd\t-n\t1\t100\t0",
        "A3C\tcmd\t-n\t1\t-5\t0\t1",
        "A3C\tcmd\t-n\t1\t100\tlater\t1",
    ]
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(WorkloadError) as info:
        read_gavel([trace], load_throughputs(write_table(tmp_path)))
    errors = info.value.errors
    assert errors[0] == f"{trace}:2: row: expected 7 or 10 tab-separated fields, got 6"
    assert errors[1] == f"{trace}:3: total_steps: must be > 0, got -5"
    assert errors[2].startswith(f"{trace}:4: row: could not convert")


@needs_gavel
def test_gavel_msr_seed0_every_job_loads() -> None:
    table = load_throughputs(GAVEL / "simulation_throughputs.json")
    workload, skipped = read_gavel([GAVEL / "msr_seed0"], table, GavelOptions(gpus_per_node=4))
    assert len(workload) == 15_264 and not skipped  # the README's row count
    gpus = [j.job.replicas * j.job.resources.devices[0].primary.count for j in workload.jobs]
    assert gpus.count(1) == 10_480 and gpus.count(64) == 1  # the README's histogram
    assert all(j.duration_s > 0 for j in workload.jobs)
    assert len({j.job.user for j in workload.jobs}) == 15
    submits = [j.job.submit_time for j in workload.jobs]
    assert submits == sorted(submits)


@needs_gavel
def test_gavel_physical_cluster_ten_field_lines() -> None:
    table = load_throughputs(GAVEL / "simulation_throughputs.json")
    path = GAVEL / "physical_cluster" / "max_min_fairness.trace"
    workload, _ = read_gavel([path], table)
    assert len(workload) == 96
    assert max(j.job.submit_time for j in workload.jobs) == 46_317


def test_runtime_file_errors_and_zeros(tmp_path: Path) -> None:
    good = tmp_path / "r.csv"
    good.write_text("runtime\n10\n0\n30.5\n", encoding="utf-8")
    assert load_runtimes(good).tolist() == [10.0, 30.5]
    bad = tmp_path / "bad.csv"
    bad.write_text("runtime\n10\nabc\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.csv:3: runtime: not a number"):
        load_runtimes(bad)


def test_quantile_table_draws_follow_the_quantiles() -> None:
    draws = RuntimeDistribution().draw(np.random.default_rng(0), 50_000)
    assert draws.min() >= 1 and draws.max() <= PHILLY_QUANTILES[-1][1]
    median = float(np.median(draws))
    assert 1000 < median < 1400  # published median 1,186 s
    capped = RuntimeDistribution(max_s=600).draw(np.random.default_rng(0), 1000)
    assert capped.max() == 600


@needs_philly
def test_philly_file_sample() -> None:
    dist = RuntimeDistribution.from_file(TRACES / "philly" / "philly_runtime.csv")
    assert dist.sample is not None and dist.sample.size == 83_152  # two zeros dropped
    assert float(np.median(dist.sample)) == 1186.0


@pytest.mark.parametrize(
    ("gpus", "per_node", "expected"),
    [(1, 8, (1, 1)), (8, 8, (1, 8)), (16, 8, (2, 8)), (12, 8, (2, 6)), (20, 8, (4, 5)),
     (7, 4, (7, 1)), (64, 8, (8, 8)), (8, 4, (2, 4))],
)  # fmt: skip
def test_split_gang(gpus: int, per_node: int, expected: tuple[int, int]) -> None:
    assert split_gang(gpus, per_node) == expected


def test_synthetic_is_deterministic_and_follows_the_mixes() -> None:
    spec = SyntheticSpec(
        jobs=2000,
        rate_per_h=120,
        gpu_mix={1: 0.5, 16: 0.5},
        model_mix={"": 1, "V100": 1},
        users=4,
        queues=2,
        seed=7,
    )
    first, second = generate(spec), generate(spec)
    assert first == second
    assert generate(SyntheticSpec(jobs=50, seed=8)) != generate(SyntheticSpec(jobs=50, seed=7))
    jobs = [j.job for j in first.jobs]
    sizes = {j.replicas * j.resources.devices[0].primary.count for j in jobs}
    assert sizes == {1, 16}
    assert {j.replicas for j in jobs} == {1, 2}
    selectors = {j.resources.devices[0].primary.selector for j in jobs}
    assert selectors == {None, 'device.attributes["model"] in ["V100"]'}
    assert {j.user for j in jobs} <= {f"user{i}" for i in range(4)}
    assert {j.queue for j in jobs} == {"q0", "q1"}
    span_h = jobs[-1].submit_time / 3600
    assert 2000 / span_h == pytest.approx(120, rel=0.15)  # Poisson rate


def test_synthetic_spec_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="gpu_mix"):
        SyntheticSpec(gpu_mix={})
    with pytest.raises(ValueError, match="rate_per_h"):
        SyntheticSpec(rate_per_h=0)


def test_rate_for_load_and_cluster_helpers() -> None:
    nodes = [gpu_node("a", 8), gpu_node("b", 4, model="V100")]
    assert gpus_per_node(nodes) == {"A100": 8, "V100": 4, "": 8}
    spec = SyntheticSpec(gpu_mix={2: 1.0}, durations=RuntimeDistribution(max_s=3600))
    rate = rate_for_load(spec, nodes, 0.5)
    mean = spec.durations.mean()
    assert rate == pytest.approx(0.5 * 12 / (2 * mean) * 3600)
    cluster = synthetic_cluster(200, seed=1)
    assert len(cluster) == 200 and len({n.name for n in cluster}) == 200
    assert synthetic_cluster(50, seed=3) == synthetic_cluster(50, seed=3)
