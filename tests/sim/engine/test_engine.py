"""The discrete-event engine: literal timelines, a scripted core, and invariants."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cpu_node, gpu_node, job
from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.cluster.state import ClusterState
from hetsched.framework.profile import ProfileSpec
from hetsched.model.device import Health, Node
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Bind,
    Change,
    DeviceHealthChanged,
    JobTransition,
    NodeRemoved,
    Preempt,
    Scheduler,
    Tick,
)
from hetsched.sim.engine import ClusterChange, EngineConfig, JobOutcome, SimResult, Simulator
from hetsched.sim.workload import Workload, WorkloadJob


def workload(*items: tuple[str, float, float, int], replicas: int = 1) -> Workload:
    """(id, submit, duration, gpus) per job."""
    return Workload(
        tuple(
            WorkloadJob(job(i, gpus=g, replicas=replicas, submit_time=s), d) for i, s, d, g in items
        )
    )


def by_id(result: SimResult) -> dict[str, JobOutcome]:
    return {j.job_id: j for j in result.jobs}


def test_second_job_waits_for_the_first() -> None:
    result = Simulator([gpu_node("n", gpus=1)], workload(("a", 0, 100, 1), ("b", 10, 50, 1))).run()
    a, b = by_id(result)["a"], by_id(result)["b"]
    assert (a.first_start, a.end, a.wait_s, a.jct_s) == (0, 100, 0, 100)
    assert (b.first_start, b.end, b.wait_s, b.jct_s) == (100, 150, 90, 140)
    assert a.state == b.state == "succeeded"
    assert result.end_time == 150


def test_gang_ends_when_every_task_has_finished() -> None:
    nodes = [gpu_node("n1", gpus=2), gpu_node("n2", gpus=2)]
    result = Simulator(nodes, workload(("g", 0, 30, 2), replicas=2)).run()
    (g,) = result.jobs
    assert (g.state, g.tasks, g.devices, g.end) == ("succeeded", 2, 4, 30)


def test_node_failure_requeues_and_restarts_from_scratch() -> None:
    nodes = [gpu_node("a", gpus=1), gpu_node("b", gpus=1)]
    changes = [ClusterChange(40, NodeRemoved("a", "node failed"))]
    result = Simulator(nodes, workload(("j", 0, 100, 1)), changes=changes).run()
    (j,) = result.jobs
    assert j.state == "succeeded"
    assert (j.first_start, j.last_start, j.end, j.run) == (0, 40, 140, 2)
    assert (j.restarts, j.lost_work_s) == (1, 40)
    assert result.lost_work_s == 40


def test_unhealthy_device_frees_capacity_only_when_healthy_again() -> None:
    nodes = [gpu_node("a", gpus=1)]
    changes = [
        ClusterChange(10, DeviceHealthChanged("a/gpu0", Health.UNHEALTHY)),
        ClusterChange(70, DeviceHealthChanged("a/gpu0", Health.HEALTHY)),
    ]
    result = Simulator(nodes, workload(("j", 0, 100, 1)), changes=changes).run()
    (j,) = result.jobs
    assert (j.state, j.last_start, j.end, j.restarts) == ("succeeded", 70, 170, 1)
    caps = result.series.capacity["A100"]
    assert min(caps) == 0 and caps[-1] == 1000


def test_cancelling_a_running_and_a_pending_job() -> None:
    nodes = [gpu_node("n", gpus=1)]
    load = workload(("a", 0, 100, 1), ("b", 0, 100, 1), ("c", 0, 10, 1))
    simulator = Simulator(nodes, load, cancellations=[(20, "a"), (20, "b")])
    result = simulator.run()
    a, b, c = (by_id(result)[k] for k in "abc")
    assert (a.state, a.end, a.lost_work_s) == ("cancelled", 20, 20)
    assert (b.state, b.first_start) == ("cancelled", None)
    assert (c.state, c.first_start, c.end) == ("succeeded", 20, 30)


def test_a_job_that_never_fits_is_reported_pending_and_the_run_ends() -> None:
    config = EngineConfig(tick_s=60, idle_ticks=5)
    result = Simulator([gpu_node("n", gpus=2)], workload(("big", 0, 10, 4)), config=config).run()
    (big,) = result.jobs
    assert big.state == "pending" and big.first_start is None
    assert "even when empty" in big.reason
    assert result.end_time == 5 * 60


def test_cpu_only_jobs_and_the_utilization_series() -> None:
    load = Workload((WorkloadJob(job("c", cpu=48_000, memory=1024), 100),))
    result = Simulator([cpu_node("n", cpu=96_000)], load).run()
    assert list(result.series.time) == [0, 100]
    assert list(result.series.used["cpu"]) == [48_000, 0]
    assert list(result.series.capacity["cpu"]) == [96_000, 96_000]


# -- a scripted core: the engine relies only on handle() and the action types --------------


class ScriptedCore:
    """Returns scripted actions at given times and records every call."""

    def __init__(self, script: dict[float, list[Any]]) -> None:
        self.script = script
        self.calls: list[tuple[float, list[Any]]] = []

    def handle(self, events: Iterable[Any], now: float) -> list[Any]:
        self.calls.append((now, list(events)))
        return self.script.pop(now, [])


def scripted(script: dict[float, list[Any]]) -> tuple[ScriptedCore, Any]:
    core = ScriptedCore(script)

    def factory(state: ClusterState, profile: ProfileSpec | None, seed: int) -> Any:
        return core

    return core, factory


def on(node: str, slot: int) -> Placement:
    return Placement(node, 1000, 1024, (DeviceShare(f"{node}/gpu{slot}", 1000),))


_SOURCE = {
    Change.SUBMITTED: None,
    Change.STARTED: JobState.PENDING,
    Change.PREEMPTED: JobState.RUNNING,
    Change.SUCCEEDED: JobState.RUNNING,
}
_TARGET = {
    Change.SUBMITTED: JobState.PENDING,
    Change.STARTED: JobState.RUNNING,
    Change.PREEMPTED: JobState.PENDING,
    Change.SUCCEEDED: JobState.SUCCEEDED,
}


def moved(job_id: str, change: Change, time: float, run: int) -> JobTransition:
    """What the core says when a scripted job changes state (the engine reports only that)."""
    return JobTransition(
        job_id, time, _SOURCE[change], _TARGET[change], change, str(change), run, 0, time
    )


def test_preempt_stops_the_run_after_the_grace_and_drops_its_finish() -> None:
    script: dict[float, list[Any]] = {
        0.0: [
            moved("j", Change.SUBMITTED, 0.0, 0),
            moved("j", Change.STARTED, 0.0, 1),
            Bind("j", 1, ((0, on("n", 0)),)),
        ],
        30.0: [
            Preempt("j", 1, (0,), 5.0, "make room"),
            moved("j", Change.PREEMPTED, 30.0, 1),
        ],
        35.0: [moved("j", Change.STARTED, 35.0, 2), Bind("j", 2, ((0, on("n", 0)),))],
        135.0: [moved("j", Change.SUCCEEDED, 135.0, 2)],
    }
    core, factory = scripted(script)
    nodes: Sequence[Node] = [gpu_node("n", gpus=1)]
    result = Simulator(
        nodes,
        workload(("j", 0, 100, 1)),
        core=factory,
        cancellations=[(30.0, "nobody")],  # wakes the engine at t=30
    ).run()
    (j,) = result.jobs
    assert [t for t, _ in core.calls] == [0.0, 30.0, 35.0, 135.0]
    stopped = [e for t, events in core.calls if t == 35.0 for e in events]
    assert [type(e).__name__ for e in stopped] == ["TaskStopped"]
    finished = [(t, e.run) for t, events in core.calls for e in events if hasattr(e, "succeeded")]
    assert finished == [(135.0, 2)]  # the run-1 finish at t=100 was dropped
    assert (j.preemptions, j.lost_work_s, j.end, j.state) == (1, 30.0, 135.0, "succeeded")
    assert result.preemptions == 1
    # the device stays held through the grace period
    used = dict(zip(result.series.time, result.series.used["A100"], strict=True))
    assert used[30.0] == 1000 and used[35.0] == 1000 and used[135.0] == 0


def test_ticks_only_while_jobs_wait() -> None:
    core, factory = scripted(
        {
            10.0: [moved("j", Change.SUBMITTED, 10.0, 0)],
            130.0: [moved("j", Change.STARTED, 130.0, 1), Bind("j", 1, ((0, on("n", 0)),))],
            135.0: [moved("j", Change.SUCCEEDED, 135.0, 1)],
        }
    )
    config = EngineConfig(tick_s=60, idle_ticks=100)
    result = Simulator(
        [gpu_node("n", gpus=1)], workload(("j", 10, 5, 1)), config=config, core=factory
    ).run()
    ticks = [t for t, events in core.calls if events == [Tick()]]
    assert ticks == [70.0, 130.0]  # none once j runs, none after it ends
    assert [t for t, _ in core.calls] == [10.0, 70.0, 130.0, 135.0]
    assert by_id(result)["j"].wait_s == 120


class WakingCore(ScriptedCore):
    """A scripted core that asks for a wakeup at a fixed time (a timeout)."""

    def next_wakeup(self) -> float | None:
        return 500.0 if not any(t == 500.0 for t, _ in self.calls) else None


def test_without_periodic_ticks_the_core_is_woken_when_it_asks() -> None:
    core = WakingCore(
        {
            10.0: [moved("j", Change.SUBMITTED, 10.0, 0)],
            500.0: [moved("j", Change.STARTED, 500.0, 1), Bind("j", 1, ((0, on("n", 0)),))],
            505.0: [moved("j", Change.SUCCEEDED, 505.0, 1)],
        }
    )
    config = EngineConfig(tick_s=0, idle_ticks=3)

    def factory(*_: Any) -> Any:
        return core

    result = Simulator(
        [gpu_node("n", gpus=1)], workload(("j", 10, 5, 1)), config=config, core=factory
    ).run()
    assert [(t, e) for t, e in core.calls if t != 10.0] == [
        (500.0, [Tick()]),
        (505.0, core.calls[-1][1]),
    ]
    assert by_id(result)["j"].end == 505.0


def test_events_at_the_same_time_go_in_one_call() -> None:
    core, factory = scripted({})
    Simulator(
        [gpu_node("n", gpus=1)],
        workload(("a", 0, 5, 1), ("b", 0, 5, 1), ("c", 7, 5, 1)),
        config=EngineConfig(idle_ticks=1),
        core=factory,
    ).run()
    first_time, first_events = core.calls[0]
    assert first_time == 0 and [e.job.id for e in first_events] == ["a", "b"]


# -- invariants over random workloads ------------------------------------------------------


class CheckedScheduler(Scheduler):
    """The real core, checking the capacity invariants after every call."""

    def handle(self, events: Iterable[Any], now: float) -> list[Any]:
        actions = super().handle(events, now)
        state = self.state
        assert (state.cpu_free >= 0).all() and (state.cpu_free <= state.cpu_cap).all()
        assert (state.mem_free >= 0).all() and (state.mem_free <= state.mem_cap).all()
        assert (state.dev_free >= 0).all() and (state.dev_free <= 1000).all()
        return actions


_jobs = st.lists(
    st.tuples(
        st.integers(0, 500),  # submit
        st.integers(1, 300),  # duration
        st.sampled_from([0, 1, 2, 4, 8]),  # gpus per task
        st.integers(1, 3),  # tasks
        st.sampled_from([1000, 500, 250]),  # share (for 1 gpu)
    ),
    max_size=25,
)


def random_workload(rows: list[tuple[int, int, int, int, int]]) -> Workload:
    items = []
    for i, (submit, duration, gpus, tasks, share) in enumerate(sorted(rows)):
        spec = job(
            f"j{i}",
            cpu=4000,
            memory=4096,
            gpus=gpus,
            share=share if gpus == 1 else 1000,
            replicas=tasks,
            user=f"u{i % 3}",
            submit_time=float(submit),
        )
        items.append(WorkloadJob(spec, float(duration)))
    return Workload(tuple(items))


NODES = [gpu_node("a", gpus=8, cpu=32_000), gpu_node("b", gpus=4, model="V100", cpu=16_000)]


@settings(max_examples=40, deadline=None)
@given(rows=_jobs, fail_at=st.one_of(st.none(), st.integers(0, 400)))
def test_capacity_holds_and_every_job_is_accounted_for(
    rows: list[tuple[int, int, int, int, int]], fail_at: int | None
) -> None:
    load = random_workload(rows)
    changes = [] if fail_at is None else [ClusterChange(float(fail_at), NodeRemoved("b"))]
    result = Simulator(
        NODES, load, changes=changes, core=CheckedScheduler, config=EngineConfig(idle_ticks=3)
    ).run()
    assert len(result.jobs) == len(load.jobs)
    for outcome in result.jobs:
        assert outcome.state in ("succeeded", "pending")
        if outcome.state == "succeeded":
            assert outcome.end is not None and outcome.last_start is not None
            assert outcome.end - outcome.last_start == outcome.duration_s
            assert outcome.first_start is not None and outcome.first_start >= outcome.submit
    for label, used in result.series.used.items():
        caps = result.series.capacity[label]
        assert all(u >= 0 for u in used)
        assert all(u <= c for u, c in zip(used, caps, strict=True))
    if all(j.state == "succeeded" for j in result.jobs) and result.series.time:
        assert all(used[-1] == 0 for used in result.series.used.values())


@settings(max_examples=15, deadline=None)
@given(rows=_jobs, seed=st.integers(0, 3))
def test_same_seed_same_result(rows: list[tuple[int, int, int, int, int]], seed: int) -> None:
    load = random_workload(rows)
    profile = ProfileSpec.model_validate({"tie_break": "random"})
    first = Simulator(NODES, load, profile, seed).run()
    second = Simulator(NODES, load, profile, seed).run()
    assert first.jobs == second.jobs
    assert first.series == second.series
    assert first.user_share_integral == second.user_share_integral


def test_progress_reports_finished_jobs() -> None:
    seen: list[tuple[int, int, float]] = []
    config = EngineConfig(progress_every=1)
    Simulator(
        [gpu_node("n", gpus=1)],
        workload(("a", 0, 10, 1), ("b", 0, 10, 1)),
        config=config,
        progress=lambda done, total, now: seen.append((done, total, now)),
    ).run()
    assert seen[0] == (0, 2, 0.0)
    assert seen[-1] == (2, 2, 20.0)
    assert [d for d, _, _ in seen] == sorted(d for d, _, _ in seen)
