"""Round mode in the simulator: random workloads through ``Simulator`` with a ``rounds``
profile keep the invariants (no device over capacity, every job ends, no job stopped or
moved by a round within its minimum runtime, only checkpointable jobs stopped)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from builders import EXAMPLES, gpu_node, job
from hetsched.cli.main import app
from hetsched.cluster.state import ClusterState
from hetsched.framework.profile import ProfileSpec, parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.device import Node
from hetsched.model.lifecycle import JobState
from hetsched.model.speed import JobSpeed
from hetsched.scheduler import (
    Action,
    Bind,
    Event,
    Migrate,
    NodeAdded,
    NodeRemoved,
    Preempt,
    Scheduler,
)
from hetsched.scheduler.actions import MigrationKind, PreemptionKind
from hetsched.sim.engine import ClusterChange, EngineConfig, Simulator
from hetsched.sim.workload import Workload, WorkloadJob

MODELS = ("A100", "V100", "K80")
NODES = [
    gpu_node("a0", 2, "A100"),
    gpu_node("a1", 2, "A100"),
    gpu_node("v0", 2, "V100"),
    gpu_node("k0", 2, "K80"),
    gpu_node("k1", 2, "K80"),
]
CHECKPOINTS = {
    "continuous": Checkpointing(interval_s=0, notice_s=5),
    "periodic": Checkpointing(interval_s=120, notice_s=10, cost_s=5),
    "none": None,
}


@dataclass
class Watch:
    """What the core did, checked as it happens."""

    min_runtime: float
    started: dict[str, float] = field(default_factory=dict)
    stops: list[tuple[str, float, float]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def check(self, state: ClusterState, actions: list[Action], now: float) -> None:
        used: Counter[str] = Counter()
        for _, share in state.allocated_devices():
            used[share.device_id] += share.share
        self.problems += [f"t={now}: {d} at {s}" for d, s in used.items() if s > 1000]
        for action in actions:
            if isinstance(action, Bind):
                self.started[action.job_id] = now
            round_stop = (isinstance(action, Preempt) and action.kind is PreemptionKind.ROUND) or (
                isinstance(action, Migrate) and action.kind is MigrationKind.ROUND
            )
            if round_stop:
                job_id = action.job_id
                self.stops.append((job_id, self.started.get(job_id, -1.0), now))


def run(
    workload: Workload, profile: ProfileSpec, changes: tuple[ClusterChange, ...] = ()
) -> tuple[Simulator, Watch]:
    assert profile.rounds is not None
    watch = Watch(profile.rounds.min_runtime)

    class Watched(Scheduler):
        def handle(self, events: Iterable[Event], now: float) -> list[Action]:
            actions = super().handle(events, now)
            watch.check(self.state, actions, now)
            return actions

    sim = Simulator(
        NODES,
        workload,
        profile,
        config=EngineConfig(idle_ticks=5),
        changes=changes,
        core=lambda state, spec, seed: Watched(state, spec, seed),
    )
    return sim, watch


rows = st.lists(
    st.tuples(
        st.integers(0, 1500),  # submit
        st.integers(100, 3000),  # work: seconds at rate 1
        st.integers(1, 2),  # gpus per task
        st.integers(1, 2),  # replicas
        st.sampled_from(sorted(CHECKPOINTS)),
        st.tuples(*[st.sampled_from([0.3, 0.5, 1.0, 2.0, 3.0]) for _ in MODELS]),
    ),
    min_size=1,
    max_size=9,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows,
    st.sampled_from(["las", "agnostic-las", "ftf", "max-throughput", "fifo", "fair-srtf"]),
    st.sampled_from([60.0, 360.0]),
    st.sampled_from(["wait", "idle"]),
    st.one_of(st.none(), st.tuples(st.integers(0, 3000), st.sampled_from(NODES))),
)
# ftf once divided by a finished job's base of 0 (six jobs done at once, two still running)
@example(
    [(0, 100, 1, 1, "continuous", (0.3, 0.3, 0.3))] * 6
    + [
        (1, 108, 2, 2, "continuous", (0.3, 0.5, 0.3)),
        (1, 100, 1, 1, "continuous", (0.3, 0.3, 0.3)),
    ],
    "ftf",
    360.0,
    "idle",
    None,
)
# the last job arrived 1 s after a boundary, with the cluster about to empty: five plain
# ticks before the next boundary ended the run and left it pending
@example(
    [(0, 100, 1, 1, "continuous", (0.3, 0.3, 0.3))] * 4
    + [(s, 100, 1, 1, "continuous", (0.3, 0.3, 0.3)) for s in (1, 361, 721)]
    + [(1081, 100, 1, 1, "continuous", (0.3, 0.3, 2.0))]
    + [(1441, 100, 1, 1, "continuous", (0.3, 0.3, 0.3))],
    "las",
    360.0,
    "wait",
    None,
)
def test_round_mode_keeps_its_invariants(
    rows: list[tuple[int, int, int, int, str, tuple[float, ...]]],
    policy: str,
    round_s: float,
    arrivals: str,
    outage: tuple[int, Node] | None,
) -> None:
    jobs = []
    for i, (submit, work, gpus, replicas, saves, rates) in enumerate(rows):
        speed = JobSpeed(dict(zip(MODELS, rates, strict=True)), work=float(work))
        spec = job(
            f"j{i}",
            gpus=gpus,
            replicas=replicas,
            submit_time=float(submit),
            checkpoint=CHECKPOINTS[saves],
            speed=speed,
        )
        jobs.append(WorkloadJob(spec, float(work)))
    profile = parse_profile(
        {"rounds": {"policy": policy, "round_s": round_s, "arrivals": arrivals, "grace_s": 5}}
    )
    changes: tuple[ClusterChange, ...] = ()
    if outage is not None:  # a node goes away for 10 minutes
        at, node = outage
        changes = (
            ClusterChange(float(at), NodeRemoved(node.name)),
            ClusterChange(
                float(at + 600),
                NodeAdded(gpu_node(f"{node.name}b", len(node.devices), node.devices[0].model)),
            ),
        )
    sim, watch = run(Workload(tuple(jobs)), profile, changes)
    result = sim.run()
    assert watch.problems == []
    assert [o.job_id for o in result.jobs if o.state is not JobState.SUCCEEDED] == []
    checkpointable = {j.job.id for j in jobs if j.job.checkpoint is not None}
    for job_id, started, stopped in watch.stops:
        assert job_id in checkpointable
        assert stopped - started >= watch.min_runtime, (job_id, started, stopped)


def test_jobs_take_turns_when_there_are_more_jobs_than_devices() -> None:
    speed = JobSpeed({"A100": 2.0, "V100": 1.0, "K80": 0.5}, work=20_000.0)
    jobs = [
        WorkloadJob(
            job(
                f"j{i}", gpus=2, submit_time=0.0, checkpoint=CHECKPOINTS["continuous"], speed=speed
            ),
            20_000.0,
        )
        for i in range(8)
    ]
    sim, watch = run(Workload(tuple(jobs)), parse_profile({"rounds": {"policy": "las"}}))
    result = sim.run()
    assert all(o.state is JobState.SUCCEEDED for o in result.jobs)
    assert result.preemptions > 0 and watch.stops
    assert all(stopped - started >= 180 for _, started, stopped in watch.stops)
    assert watch.problems == []


WORKLOAD = """\
id,submit_time,duration,user,queue,priority,cpu,memory,device_class,count,share,selector,gang,speed,work,checkpoint_interval,checkpoint_notice
r0,0,3600,u0,default,0,4,16Gi,gpu,1,,,1,V100:2;P100:1.5;K80:1,7200s@K80,0,10
r1,0,3600,u1,default,0,4,16Gi,gpu,4,,,1,V100:3;P100:2;K80:1,20000s@K80,0,10
r2,100,3600,u2,default,0,4,16Gi,gpu,2,,,1,V100:1.2;P100:1.1;K80:1,9000s@K80,0,10
etl,50,600,u3,default,0,8,16Gi,,,,,1,,,,
"""


def test_sim_replay_runs_a_rounds_profile(tmp_path: Path) -> None:
    workload = tmp_path / "w.csv"
    workload.write_text(WORKLOAD)
    result = CliRunner().invoke(
        app,
        [
            "sim", "replay", "--cluster", str(EXAMPLES / "clusters" / "gavel-small.yaml"),
            "--workload", str(workload), "--profile", str(EXAMPLES / "profiles" / "rounds.yaml"),
            "-o", "json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (replay,) = json.loads(result.output)["replays"]
    jobs = {j["id"]: j for j in replay["jobs"]}
    assert {j["state"] for j in jobs.values()} == {"succeeded"}
    # the CPU-only job starts at once; the GPU job that arrives mid-round waits for the
    # boundary at 360 s, then runs its work on the fastest model
    assert jobs["etl"]["start"] == 50.0
    assert jobs["r2"]["start"] == 360.0
    assert jobs["r2"]["end"] == pytest.approx(360.0 + 9000 / 1.2)
    assert jobs["r1"]["end"] == pytest.approx(20000 / 3)
