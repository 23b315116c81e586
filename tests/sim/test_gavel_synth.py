"""Gavel's continuous workload generator and ``sim synth --gavel``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from builders import EXAMPLES
from hetsched.cli.main import app
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs
from hetsched.sim.gavel_synth import (
    ARTIFACT_TEMPLATES,
    TEMPLATES,
    GavelWorkloadSpec,
    generate_gavel,
)
from hetsched.sim.workload import read_workload

TABLE = load_throughputs(BUNDLED_THROUGHPUTS)

# The first jobs of Gavel's stream for seed 0, as its own simulator draws them (its
# generator run on the same table): (arrival s, job type, GPUs, V100 duration s, steps).
# The default job table is in the order of Gavel's simulator of May 2020 (the sweeps behind
# its published mean JCTs): the same draws give Recommendation 1024 and 4096 where the
# artifact's later order gives 2048 and 8192, and A3C (index 14 there, not distributed)
# makes the multi-GPU stream draw a template again, so from job 4 on the jobs differ.
SINGLE_4_PER_H_OSDI20 = [
    (0.0, "ResNet-18 (batch size 64)", 1, 68344.3501, 1646636.276),
    (244.586, "Transformer (batch size 16)", 1, 31016.6091, 343170.469),
    (951.775, "Recommendation (batch size 1024)", 1, 2146.6088, 28512.482),
    (1367.543, "Recommendation (batch size 4096)", 1, 7386.6748, 28852.725),
    (2201.068, "A3C", 1, 6858.6982, 49216.421),
]
MULTI_2_6_PER_H_OSDI20 = [
    (0.0, "ResNet-18 (batch size 64)", 8, 68344.3501, 17484476.261),
    (376.286, "Transformer (batch size 16)", 1, 31016.6091, 343170.469),
    (1464.269, "Recommendation (batch size 1024)", 1, 2146.6088, 28512.482),
    (2103.912, "Recommendation (batch size 4096)", 1, 7386.6748, 28852.725),
    (3386.258, "LM (batch size 10)", 4, 6858.6982, 833178.332),
    (4746.992, "A3C", 1, 2086.0203, 14968.796),
    (4840.833, "LM (batch size 10)", 4, 159133.7217, 19331185.713),
]
SINGLE_4_PER_H = [
    (0.0, "ResNet-18 (batch size 64)", 1, 68344.3501, 1646636.276),
    (244.586, "Transformer (batch size 16)", 1, 31016.6091, 343170.469),
    (951.775, "Recommendation (batch size 2048)", 1, 2146.6088, 16034.378),
    (1367.543, "Recommendation (batch size 8192)", 1, 7386.6748, 20989.313),
]
MULTI_2_6_PER_H = [
    (0.0, "ResNet-18 (batch size 64)", 8, 68344.3501, 17484476.261),
    (376.286, "Transformer (batch size 16)", 1, 31016.6091, 343170.469),
    (1464.269, "Recommendation (batch size 2048)", 1, 2146.6088, 16034.378),
    (2103.912, "Recommendation (batch size 8192)", 1, 7386.6748, 20989.313),
]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (GavelWorkloadSpec(jobs=5, rate_per_h=4.0), SINGLE_4_PER_H_OSDI20),
        (GavelWorkloadSpec(jobs=7, rate_per_h=2.6, multi_gpu=True), MULTI_2_6_PER_H_OSDI20),
        (GavelWorkloadSpec(jobs=4, rate_per_h=4.0, job_table="artifact"), SINGLE_4_PER_H),
        (
            GavelWorkloadSpec(jobs=4, rate_per_h=2.6, multi_gpu=True, job_table="artifact"),
            MULTI_2_6_PER_H,
        ),
    ],
)
def test_the_stream_is_gavels(spec: GavelWorkloadSpec, expected: list[tuple[object, ...]]) -> None:
    workload = generate_gavel(spec, TABLE)
    for item, (arrival, job_type, gpus, duration, steps) in zip(
        workload.jobs, expected, strict=True
    ):
        job = item.job
        assert job.submit_time == pytest.approx(arrival, abs=1e-3)
        assert (job.name, job.speed.job_type) == (job_type, job_type)
        assert job.replicas * job.resources.devices[0].primary.count == gpus
        assert item.duration_s == pytest.approx(duration, abs=1e-3)
        assert job.speed.work == pytest.approx(steps, abs=1e-3)
        # its speed model: V100 time = the duration; rates for all three worker types
        assert set(job.speed.rates) == {"v100", "p100", "k80"}
        assert job.speed.work / job.speed.rates["v100"] == pytest.approx(item.duration_s)


def test_the_two_orders_are_one_table() -> None:
    # the same 26 templates; only A3C moves (to index 14, before the LMs) and CycleGAN
    # stays last, so the draws of single-GPU jobs keep their durations and arrivals
    assert sorted(TEMPLATES, key=str) == sorted(ARTIFACT_TEMPLATES, key=str)
    assert [t.job_type for t in TEMPLATES[13:16]] == [
        "Transformer (batch size 256)",
        "A3C",
        "LM (batch size 5)",
    ]
    assert TEMPLATES[-1].job_type == ARTIFACT_TEMPLATES[-1].job_type == "CycleGAN"
    osdi = generate_gavel(GavelWorkloadSpec(jobs=200, rate_per_h=4.0), TABLE)
    artifact = generate_gavel(GavelWorkloadSpec(jobs=200, job_table="artifact"), TABLE)
    assert [j.duration_s for j in osdi.jobs] == [j.duration_s for j in artifact.jobs]
    assert [j.job.name for j in osdi.jobs] != [j.job.name for j in artifact.jobs]


def test_distributions_over_a_long_stream() -> None:
    workload = generate_gavel(GavelWorkloadSpec(jobs=6000, rate_per_h=4.0), TABLE)
    durations = np.array([j.duration_s for j in workload.jobs]) / 3600
    # 0.8 x 4.67 h + 0.2 x 65.1 h = 16.8 h in expectation (Gavel's own sanity check)
    assert 15.0 < durations.mean() < 18.5
    assert durations.min() >= 60 * 10**1.5 / 3600 and durations.max() <= 60 * 10**4 / 3600
    assert np.mean(durations > 1000 / 60) == pytest.approx(0.2, abs=0.02)
    gaps = np.diff([j.job.submit_time for j in workload.jobs])
    assert gaps.min() >= 0 and gaps.mean() == pytest.approx(900, rel=0.05)  # 4 jobs/h
    types = {j.job.name for j in workload.jobs}
    assert types == {t.job_type for t in TEMPLATES} and len(types) == 26
    assert all(j.job.replicas == 1 for j in workload.jobs)
    assert len({j.job.user for j in workload.jobs}) == 6000  # fairness between jobs


def test_multi_gpu_mix_and_priorities() -> None:
    spec = GavelWorkloadSpec(
        jobs=6000, rate_per_h=2.6, multi_gpu=True, multi_priority=True, users=10, gpus_per_node=4
    )
    workload = generate_gavel(spec, TABLE)
    gpus = np.array(
        [j.job.replicas * j.job.resources.devices[0].primary.count for j in workload.jobs]
    )
    for size, share in ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)):
        assert np.mean(gpus == size) == pytest.approx(share, abs=0.02)
    eight = [j.job for j in workload.jobs if j.job.replicas == 2]
    assert eight and all(j.resources.devices[0].primary.count == 4 for j in eight)
    distributed = {t.job_type for t in TEMPLATES if t.distributed}
    assert all(j.job.name in distributed for j, g in zip(workload.jobs, gpus, strict=True) if g > 1)
    weights = np.array([j.job.priority for j in workload.jobs])
    assert set(weights) == {1, 5} and np.mean(weights == 5) == pytest.approx(0.2, abs=0.02)
    assert {j.job.user for j in workload.jobs} == {f"user{i}" for i in range(10)}


def test_seeds_and_validation() -> None:
    a = generate_gavel(GavelWorkloadSpec(jobs=50, seed=1), TABLE)
    b = generate_gavel(GavelWorkloadSpec(jobs=50, seed=1), TABLE)
    c = generate_gavel(GavelWorkloadSpec(jobs=50, seed=2), TABLE)
    assert a == b and a != c
    with pytest.raises(ValueError, match="rate_per_h must be > 0"):
        GavelWorkloadSpec(rate_per_h=0)
    with pytest.raises(ValueError, match="jobs must be >= 0"):
        GavelWorkloadSpec(jobs=-1)
    with pytest.raises(ValueError, match="job_table must be one of osdi20, artifact"):
        GavelWorkloadSpec(job_table="2019")
    with pytest.raises(ValueError, match="reference worker type 'a100'"):
        generate_gavel(GavelWorkloadSpec(reference="a100"), TABLE)
    small = {"v100": {("A3C", 1): 1.0}}
    with pytest.raises(ValueError, match="the v100 throughputs lack 25 job type"):
        generate_gavel(GavelWorkloadSpec(jobs=1), small)


def test_cli_synth_gavel(tmp_path: Path) -> None:
    out = tmp_path / "gavel.csv"
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "synth",
            "--gavel",
            "--multi-gpu",
            "--jobs",
            "40",
            "--rate-per-h",
            "2.6",
            "--out",
            str(out),
            "--cluster",
            str(EXAMPLES / "clusters" / "gavel-small.yaml"),
        ],
    )
    assert result.exit_code == 0, result.output
    workload = read_workload(out)
    assert len(workload) == 40
    first = workload.jobs[0].job
    assert first.speed.job_type == "ResNet-18 (batch size 64)"
    assert (first.replicas, first.resources.devices[0].primary.count) == (2, 4)  # 4-GPU nodes
    assert first.speed.work == pytest.approx(17484476.261, abs=1e-3)
    bad = CliRunner().invoke(app, ["sim", "synth", "--multi-gpu", "--out", str(out)])
    assert bad.exit_code == 2 and "need --gavel" in bad.output
    bad = CliRunner().invoke(
        app, ["sim", "synth", "--gavel", "--rate-per-h", "-1", "--out", str(out)]
    )
    assert bad.exit_code == 2 and "rate_per_h must be > 0" in bad.output
