"""The Philly and Alibaba PAI experiments: their declared workload, cluster, policies and
metrics, on small runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import gpu_node
from hetsched.sim.experiments.alibaba_pai import PaiExperiment
from hetsched.sim.experiments.philly import METRICS, PhillyExperiment, gpu_models

NODES = [gpu_node("a", 4, "A100"), gpu_node("b", 4, "A100"), gpu_node("v", 8, "V100")]
PAI_ROWS = "\n".join(
    [f"p{i},P100,64,512,2" for i in range(6)]
    + [f"t{i},T4,96,512,2" for i in range(4)]
    + ["v0,V100,96,512,8", "v1,V100,96,512,8", "c0,CPU,96,512,0"]
)


def test_gpu_models_count_each_model() -> None:
    assert gpu_models(NODES) == {"A100": 8, "V100": 8}


@pytest.mark.parametrize(
    ("policies", "expected"),
    [(("fifo",), ["fifo"]), (("drf", "fifo"), ["drf", "fifo"])],
)
def test_one_row_per_policy_with_every_metric(
    policies: tuple[str, ...], expected: list[str]
) -> None:
    rows = PhillyExperiment(jobs=30, load=1.2, seed=3, policies=policies).run(NODES)
    assert [r["policy"] for r in rows] == expected
    for row in rows:
        assert set(row) == {"policy", *METRICS}
        assert row["jobs"] == row["finished"] == 30
        assert 0.0 < row["gpu_utilization"] <= 1.0
        assert 0.0 < row["jain_users"] <= 1.0
        assert row["jct_p99_h"] >= row["jct_mean_h"] > 0.0
        assert row["wait_mean_h"] >= 0.0


def test_a_run_is_a_function_of_its_seed() -> None:
    one = PhillyExperiment(jobs=25, load=1.0, seed=7, policies=("fifo",))
    assert one.run(NODES) == one.run(NODES)
    other = PhillyExperiment(jobs=25, load=1.0, seed=8, policies=("fifo",))
    assert other.run(NODES) != one.run(NODES)


def test_a_higher_load_draws_arrivals_closer_together() -> None:
    def last_arrival(load: float) -> float:
        workload = PhillyExperiment(jobs=200, load=load, seed=1).workload(NODES)
        return max(item.job.submit_time for item in workload.jobs)

    assert last_arrival(1.6) < last_arrival(0.4)


def test_durations_are_capped() -> None:
    workload = PhillyExperiment(jobs=300, seed=2, max_duration_s=3600.0).workload(NODES)
    assert max(item.duration_s for item in workload.jobs) <= 3600.0


def test_pai_runs_the_stream_on_the_gpu_machines_of_the_trace(tmp_path: Path) -> None:
    (tmp_path / "pai_machine_spec.csv").write_text(PAI_ROWS + "\n", encoding="utf-8")
    stream = PhillyExperiment(jobs=20, load=1.0, seed=1, policies=("fifo",))
    experiment = PaiExperiment(tmp_path, scale=0.5, stream=stream)
    cluster = experiment.cluster()
    assert gpu_models(cluster) == {"P100": 6, "T4": 4, "V100": 8}
    rows = experiment.run()
    assert [r["policy"] for r in rows] == ["fifo"]
    assert rows[0]["finished"] == 20
