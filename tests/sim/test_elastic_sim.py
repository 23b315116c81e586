"""Elastic jobs in the simulator: a run's throughput follows its count (linear by default,
the profile's throughput table at the run's size for a job type the table lists at several
sizes); outcomes computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import gpu_node, job
from hetsched.framework.profile import ProfileSpec, parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.job import Job
from hetsched.model.speed import JobSpeed
from hetsched.sim.engine.run import EngineConfig
from hetsched.sim.replay import Policy, replay
from hetsched.sim.workload import Workload, WorkloadJob

SAVES = Checkpointing(None, 10.0, "SIGUSR1", 0.0)


def _ends(jobs: list[tuple[Job, float]], profile: ProfileSpec | None = None) -> dict[str, float]:
    workload = Workload(tuple(WorkloadJob(j, d) for j, d in jobs))
    policy = Policy("fifo", profile or ProfileSpec())
    result = replay([gpu_node("g0", gpus=4)], workload, policy, 0, EngineConfig(tick_s=0))
    return {o.job_id: o.end for o in result.result.jobs if o.end is not None}


@pytest.mark.parametrize(
    ("elastic", "expected"),
    [
        # 2 of 4 GPUs free: it runs at half its rate beside the long job, 100 s -> 200 s
        (True, 200.0),
        # rigid: it waits for the long job (1000 s), then runs 100 s
        (False, 1100.0),
    ],
)
def test_an_elastic_job_runs_at_the_rate_of_its_count(elastic: bool, expected: float) -> None:
    long = job("long", gpus=2)
    e = job("e", gpus=1, replicas=4, min_replicas=1 if elastic else None, checkpoint=SAVES)
    ends = _ends([(long, 1000.0), (e, 100.0)])
    assert ends["e"] == pytest.approx(expected)
    assert ends["long"] == pytest.approx(1000.0)


def test_a_scaling_table_gives_the_rate_at_each_size(tmp_path: Path) -> None:
    # Gavel's table format, one type at three sizes: 3.0 steps/s on 4 GPUs, 1.8 on 2. At
    # full size 100 s are 300 steps, which take 300 / 1.8 = 166.7 s on the 2 GPUs left
    # beside the long job (linear scaling would say 200 s)
    rows = {
        "('bert', 1)": {"null": 1.0},
        "('bert', 2)": {"null": 1.8},
        "('bert', 4)": {"null": 3.0},
    }
    (tmp_path / "throughputs.json").write_text(json.dumps({"A100": rows}))
    profile = parse_profile({"speeds": {"table": str(tmp_path / "throughputs.json")}})
    e = job("e", gpus=1, replicas=4, min_replicas=1, speed=JobSpeed(job_type="bert"),
            checkpoint=SAVES)  # fmt: skip
    ends = _ends([(job("long", gpus=2), 1000.0), (e, 100.0)], profile)
    assert ends["e"] == pytest.approx(300 / 1.8)


@pytest.mark.parametrize(
    ("elastic", "moves", "preemptions", "end"),
    [
        # shrunk 4 -> 2 at 150 s (100 s saved at 100 s), +50 at half rate to 250 s (saved
        # then); the grow stops it at 250 s, its 30 s grace, 850 s left at 4 from 280 s
        (True, 2, 0, 1130.0),
        # preempted at 150 s, back at 250 s from its 100 s checkpoint: 900 s left
        (False, 0, 1, 1150.0),
    ],
)
def test_a_shrink_loses_the_work_since_the_last_checkpoint_as_a_preemption_does(
    elastic: bool, moves: int, preemptions: int, end: float
) -> None:
    every = Checkpointing(100.0, 0.0, "SIGUSR1", 0.0)  # a checkpoint each 100 s, no notice
    e = job("e", gpus=1, replicas=4, min_replicas=2 if elastic else None, checkpoint=every)
    urgent = job("hi", gpus=2, priority=5, submit_time=150.0)
    workload = Workload((WorkloadJob(e, 1000.0), WorkloadJob(urgent, 100.0)))
    spec = {
        "queue_sort": "priority",
        "post_filter": [{"name": "preemption", "args": {"grace_s": 0}}],
    }
    policy = Policy("priority", parse_profile(spec))
    done = replay([gpu_node("g0", gpus=4)], workload, policy, 0, EngineConfig(tick_s=0))
    outcome = {o.job_id: o for o in done.result.jobs}["e"]
    # 4 tasks x the 50 s since the checkpoint at 100 s, whether shrunk or preempted
    assert outcome.lost_work_s == pytest.approx(200.0)
    assert (done.result.migrations, outcome.preemptions) == (moves, preemptions)
    assert outcome.end == pytest.approx(end)
