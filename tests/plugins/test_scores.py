"""Literal cases for the score plugins: which node each one prefers, and why."""

import numpy as np
import pytest

from builders import cpu_node, gpu_node
from hetsched.cluster import ClusterState, DeviceShare, Placement
from hetsched.framework import CycleContext, SchedulerHandle
from hetsched.framework.profile import parse_profile
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.speed import JobSpeed, SpeedTable
from hetsched.plugins.allocated import MostAllocated, Spread
from hetsched.plugins.bestfit import BestFit, BestFitArgs
from hetsched.plugins.dotprod import DotProd, DotProdArgs
from hetsched.plugins.firstfit import FirstFit
from hetsched.plugins.fit import Fit
from hetsched.plugins.speed import Speed
from hetsched.scheduler import Bind, JobSubmitted, Scheduler


def cluster() -> ClusterState:
    state = ClusterState(
        [
            gpu_node("busy", gpus=8, cpu=64_000, memory=256 * 1024),
            gpu_node("idle", gpus=8, cpu=64_000, memory=256 * 1024),
            cpu_node("cpu", cpu=64_000, memory=256 * 1024),
        ]
    )
    devices = [d.id for d in state.nodes[0].devices[:6]]
    state.allocate(
        "x", Placement("busy", 48_000, 128 * 1024, tuple(DeviceShare(d, 1000) for d in devices))
    )
    return state


def best(plugin: object, state: ClusterState, request: TaskRequest) -> str:
    ctx = CycleContext(state, Job("j", request), request)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    scores = plugin.score(ctx, rows)  # type: ignore[attr-defined]
    assert scores.shape == rows.shape
    return state.nodes[int(rows[int(np.argmax(scores))])].name


GPU_TASK = TaskRequest(4000, 8192, (DeviceRequest.of("gpu", 1),))
CPU_TASK = TaskRequest(4000, 8192)


@pytest.mark.parametrize(
    ("plugin", "gpu_choice", "cpu_choice"),
    [
        (FirstFit(), "busy", "busy"),
        (BestFit(BestFitArgs()), "busy", "busy"),  # packs onto the used node
        (MostAllocated(BestFitArgs()), "busy", "busy"),
        (Spread(BestFitArgs()), "idle", "idle"),  # idle and cpu tie; the first row wins
        (DotProd(DotProdArgs()), "idle", "idle"),  # most free along the request
        (DotProd(DotProdArgs(prefer="min")), "busy", "busy"),
    ],
    ids=["firstfit", "bestfit", "mostallocated", "spread", "dotprod-max", "dotprod-min"],
)
def test_preferred_node(plugin: object, gpu_choice: str, cpu_choice: str) -> None:
    state = cluster()
    assert best(plugin, state, GPU_TASK) == gpu_choice
    assert best(plugin, state, CPU_TASK) == cpu_choice


def test_bestfit_keeps_cpu_work_off_idle_gpus() -> None:
    state = cluster()
    state.release("x")  # now: two idle GPU nodes and a CPU node
    assert best(BestFit(BestFitArgs()), state, CPU_TASK) == "cpu"


def test_bestfit_weights_change_the_choice() -> None:
    state = cluster()
    cpu_only = BestFit(BestFitArgs.model_validate({"weights": {"memory": 0, "devices": 0}}))
    # on CPU alone, the busy node (16 cores left) is the best fit, idle GPUs do not count
    assert best(cpu_only, state, CPU_TASK) == "busy"


def test_scores_are_in_range() -> None:
    state = cluster()
    ctx = CycleContext(state, Job("j", GPU_TASK), GPU_TASK)
    rows = np.arange(2)
    for plugin in (
        BestFit(BestFitArgs()),
        Spread(BestFitArgs()),
        DotProd(DotProdArgs()),
        FirstFit(),
    ):
        scores = plugin.score(ctx, rows)
        assert ((scores >= 0) & (scores <= 100)).all(), (plugin.name, scores)


def _speed_cluster() -> ClusterState:
    return ClusterState(
        [
            gpu_node("t4", gpus=4, model="T4"),
            gpu_node("a100", gpus=4, model="A100"),
            gpu_node("v100", gpus=4, model="V100"),
            cpu_node("cpu"),
        ]
    )


@pytest.mark.parametrize(
    ("speed", "expected"),
    [
        # the job's own speed map: the fastest model's node scores 100, the others pro rata
        (
            JobSpeed({"A100": 3.0, "V100": 1.5, "T4": 0.3}),
            {"t4": 10.0, "a100": 100.0, "v100": 50.0},
        ),
        # a model faster on the V100 than on the A100 (Gavel has such job types)
        (
            JobSpeed({"A100": 1.0, "V100": 2.0, "T4": 0.5}),
            {"t4": 25.0, "a100": 50.0, "v100": 100.0},
        ),
        # an unlisted model runs at the slowest listed rate: never assumed faster
        (JobSpeed({"A100": 4.0, "V100": 2.0}), {"t4": 50.0, "a100": 100.0, "v100": 50.0}),
        # no speed information: every model equal, 100 everywhere
        (JobSpeed(), {"t4": 100.0, "a100": 100.0, "v100": 100.0}),
    ],
)
def test_speed_prefers_the_fastest_model(speed: JobSpeed, expected: dict[str, float]) -> None:
    state = _speed_cluster()
    job = Job("j", GPU_TASK, speed=speed)
    ctx = CycleContext(state, job, GPU_TASK)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    scores = Speed().score(ctx, rows)
    assert {state.nodes[int(r)].name: float(s) for r, s in zip(rows, scores, strict=True)} == (
        pytest.approx(expected)
    )


def test_speed_reads_job_types_from_the_handles_table() -> None:
    class Handle:
        speed_table = SpeedTable.of({"bert": {"A100": 3.0, "V100": 1.0, "T4": 0.5}})

    state = _speed_cluster()
    job = Job("j", GPU_TASK, speed=JobSpeed(job_type="bert"))
    ctx = CycleContext(state, job, GPU_TASK)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    scores = Speed(handle=Handle()).score(ctx, rows)  # type: ignore[arg-type]
    assert state.nodes[int(rows[int(np.argmax(scores))])].name == "a100"
    # a CPU-only task is not the score's business
    cpu_ctx = CycleContext(state, job, CPU_TASK)
    cpu_rows = np.flatnonzero(Fit().filter(cpu_ctx, state.active))
    assert (Speed(handle=Handle()).score(cpu_ctx, cpu_rows) == 100.0).all()  # type: ignore[arg-type]


def test_speed_reads_the_cores_table_through_the_handle() -> None:
    """The scheduler is the handle: its driver sets ``speed_table``, the plugin reads it
    per use, so a table replaced between two ``handle`` calls is the one that decides."""
    core = Scheduler(_speed_cluster(), parse_profile({"score": [{"name": "speed"}]}))
    handle: SchedulerHandle = core
    assert handle.speed_table is None
    bert = JobSpeed(job_type="bert")

    def placed_on(job_id: str, now: float) -> str:
        actions = core.handle([JobSubmitted(Job(job_id, GPU_TASK, speed=bert))], now)
        binds = [a for a in actions if isinstance(a, Bind)]
        return binds[0].placements[0][1].node

    core.speed_table = SpeedTable.of({"bert": {"A100": 3.0, "V100": 1.0, "T4": 0.5}})
    assert placed_on("first", 0.0) == "a100"
    core.speed_table = SpeedTable.of({"bert": {"A100": 1.0, "V100": 1.0, "T4": 4.0}})
    assert placed_on("second", 1.0) == "t4"
