"""The simulator runs work: speeds per device model, checkpoints kept across stops, what a
stop loses; and migration's properties over random workloads."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from hetsched.framework.profile import ProfileSpec, parse_profile
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.device import Node
from hetsched.model.lifecycle import JobState
from hetsched.model.selector import compile_selector
from hetsched.model.speed import JobSpeed
from hetsched.scheduler import Migrate, Preempt
from hetsched.sim.engine import EngineConfig, JobOutcome, Simulator
from hetsched.sim.progress import RunProgress, Saving
from hetsched.sim.workload import Workload, WorkloadJob

# the CEL library raises the recursion limit on its first compile: do that before hypothesis
# runs, which warns when the limit changes under it
compile_selector('device.attributes["model"] == "A"')

PREEMPTION = {
    "queue_sort": "priority",
    "post_filter": [{"name": "preemption", "args": {"grace_s": 5}}],
}


def _by_id(sim: Simulator) -> dict[str, JobOutcome]:
    return {o.job_id: o for o in sim.run().jobs}


# -- one run's arithmetic --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "end"),
    [
        (RunProgress(0, 0, 1000, 1.0), 1000),
        (RunProgress(10, 400, 1000, 2.0), 310),  # resumed at 400: 600 left at rate 2
        (RunProgress(0, 0, 1000, 1.0, 100, 10), 1090),  # 9 checkpoints written on the way
        (RunProgress(0, 0, 1000, 1.0, 0, 10), 1000),  # continuous: no cost
        (RunProgress(0, 0, 1000, 0.0), math.inf),  # no progress on this model
        (RunProgress(5, 1000, 1000, 1.0), 5),
    ],
)
def test_run_end(run: RunProgress, end: float) -> None:
    assert run.end() == end


def test_the_next_save_after_a_save_is_the_one_after_it() -> None:
    # 38 + 60.1 = 98.1, but (98.1 - 38) / 60.1 rounds down below 1: the save at 98.1 once
    # answered itself as the next one, and the simulator's loop never advanced
    run = RunProgress(38.0, 0.0, 1e9, 1.0, 60.0, 0.1)
    assert run.next_save(38.0) == pytest.approx(98.1)
    assert run.next_save(98.1) == pytest.approx(158.2)


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0, 5000, allow_nan=False),
    st.floats(0.1, 500, allow_nan=False),
    st.sampled_from([0.0, 0.1, 1.0, 5.0, 0.3]),
)
def test_saves_come_one_cycle_apart_and_always_later(
    start: float, interval: float, cost: float
) -> None:
    run = RunProgress(start, 0.0, 1e12, 1.0, interval, cost)
    after = start
    for _ in range(50):
        at = run.next_save(after)
        assert at is not None and at > after
        assert at - after == pytest.approx(interval + cost, rel=1e-6, abs=1e-6) or after == start
        after = at


@pytest.mark.parametrize(
    ("now", "notice", "saving"),
    [
        # computing, 30 s into the third interval; the notice lets it write one (10 s)
        (250, 30, Saving(230, 260, True, 0, 30)),
        # no notice: it keeps the checkpoint written at t=220 (work 200), loses 30 s
        (250, 0, Saving(200, 250, False, 30, 20)),
        # a notice too short to write one: it runs to the notice's end, then loses 35 s
        (250, 5, Saving(200, 255, False, 35, 20)),
        # in the middle of a periodic write (t=215 of 210..220): it finishes that one
        (215, 30, Saving(200, 220, True, 0, 20)),
    ],
)
def test_what_a_stop_keeps(now: float, notice: float, saving: Saving) -> None:
    run = RunProgress(0, 0, 1000, 1.0, 100, 10)
    assert run.stop(now, notice, True) == saving


def test_no_interval_keeps_only_what_a_notice_saves() -> None:
    run = RunProgress(0, 0, 1000, 2.0, None, 4)
    assert run.stop(100, 0, True) == Saving(0, 100, False, 100, 0)
    assert run.stop(100, 10, True) == Saving(200, 104, True, 0, 4)
    assert run.next_save(0) is None


# -- the engine ------------------------------------------------------------------------------


def test_a_preempted_job_resumes_from_what_it_saved() -> None:
    saves = Checkpointing(interval_s=100, notice_s=30, cost_s=10)
    low = job("low", gpus=1, checkpoint=saves)
    high = job("high", gpus=1, priority=10, submit_time=250)
    workload = Workload((WorkloadJob(low, 1000.0), WorkloadJob(high, 100.0)))
    sim = Simulator([gpu_node("g", gpus=1)], workload, parse_profile(PREEMPTION))
    out = _by_id(sim)
    # low saves inside its notice (t=250..260), stops at 265; high runs 265..365; low
    # resumes with 230 of 1000 done and writes 7 more checkpoints on the way
    assert out["high"].first_start == 265 and out["high"].end == 365
    assert (out["low"].end, out["low"].lost_work_s, out["low"].checkpoint_s) == (1205, 0, 100)
    assert "resum" not in out["low"].reason


def test_without_a_notice_a_job_keeps_its_last_periodic_checkpoint() -> None:
    saves = Checkpointing(interval_s=100, notice_s=0, cost_s=0)
    low = job("low", gpus=1, checkpoint=saves)
    high = job("high", gpus=1, priority=10, submit_time=250)
    workload = Workload((WorkloadJob(low, 1000.0), WorkloadJob(high, 100.0)))
    out = _by_id(Simulator([gpu_node("g", gpus=1)], workload, parse_profile(PREEMPTION)))
    # stopped at 250 with 200 saved: 50 s lost; back at 355, 800 left
    assert out["low"].lost_work_s == 50
    assert out["low"].end == 355 + 800


def test_a_job_without_checkpoints_starts_over() -> None:
    low = job("low", gpus=1)
    high = job("high", gpus=1, priority=10, submit_time=250)
    workload = Workload((WorkloadJob(low, 1000.0), WorkloadJob(high, 100.0)))
    out = _by_id(Simulator([gpu_node("g", gpus=1)], workload, parse_profile(PREEMPTION)))
    assert out["low"].lost_work_s == 250 and out["low"].end == 355 + 1000


@pytest.mark.parametrize(("model", "end"), [("A100", 500.0), ("V100", 1000.0), ("T4", 4000.0)])
def test_work_drops_at_the_speed_of_the_model(model: str, end: float) -> None:
    speed = JobSpeed({"A100": 2.0, "V100": 1.0, "T4": 0.25}, work_s=1000, work_model="V100")
    workload = Workload((WorkloadJob(job("j", gpus=1, speed=speed), 1000.0),))
    out = _by_id(Simulator([gpu_node("g", gpus=1, model=model)], workload))
    assert out["j"].end == end


def test_a_gang_runs_at_its_slowest_model() -> None:
    speed = JobSpeed({"A100": 2.0, "V100": 1.0}, work=1000)
    nodes = [gpu_node("a", gpus=1, model="A100"), gpu_node("v", gpus=1, model="V100")]
    workload = Workload((WorkloadJob(job("j", gpus=1, replicas=2, speed=speed), 500.0),))
    assert _by_id(Simulator(nodes, workload))["j"].end == 1000


def test_a_continuous_checkpointer_loses_nothing_even_to_a_lost_device() -> None:
    from hetsched.model.device import Health
    from hetsched.model.job import DeviceFailurePolicy
    from hetsched.scheduler import DeviceHealthChanged
    from hetsched.sim.engine import ClusterChange

    spec = job(
        "j",
        gpus=1,
        checkpoint=Checkpointing(0, 0),
        on_device_failure=DeviceFailurePolicy.CHECKPOINT,
    )
    workload = Workload((WorkloadJob(spec, 1000.0),))
    change = ClusterChange(400, DeviceHealthChanged("g/gpu0", Health.UNHEALTHY, "removed"))
    out = _by_id(Simulator([gpu_node("g", gpus=2)], workload, changes=[change]))
    assert out["j"].lost_work_s == 0 and out["j"].end == 1000


def test_a_defragmentation_move_in_the_simulator() -> None:
    saves = Checkpointing(interval_s=100, notice_s=30, cost_s=10)
    nodes = [gpu_node("n1", gpus=2, model="A"), gpu_node("n2", gpus=2, model="B")]
    jobs = (
        WorkloadJob(job("a", gpus=1, checkpoint=saves), 1000.0),
        WorkloadJob(
            job("b", gpus=1, checkpoint=saves, selector='device.attributes["model"] == "B"'),
            1000.0,
        ),
        WorkloadJob(job("c", gpus=2, submit_time=200), 100.0),
    )
    profile = parse_profile(
        {"migration": {"min_runtime_s": 60, "defrag": {"enabled": True, "min_interval_s": 0}}}
    )
    sim = Simulator(nodes, Workload(jobs), profile)
    result = sim.run()
    out = {o.job_id: o for o in result.jobs}
    # a moves at 200 (saves by 210, gone at 240 after the grace); c starts at 240
    assert (out["a"].migrations, out["c"].first_start, result.migrations) == (1, 240, 1)
    assert out["a"].end == 240 + 810 + 80 and out["a"].lost_work_s == 0


# -- properties ------------------------------------------------------------------------------


class _Watched(Simulator):
    """Records every preemption and move, and what each stop kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.preempts: list[tuple[str, str]] = []
        self.moves: list[tuple[str, float]] = []
        self.stops: list[tuple[str, Saving]] = []
        work_stop = self.work.stop

        def stop(key: TaskKey, notice_s: float, now: float) -> Any:
            answer = work_stop(key, notice_s, now)
            if answer is not None and answer[1]:
                self.stops.append((key.job, answer[0]))
            return answer

        self.work.stop = stop  # type: ignore[method-assign]

    def preempted(self, action: Preempt) -> None:
        super().preempted(action)
        self.preempts.append((action.preemptor, action.job_id))

    def migrating(self, action: Migrate) -> None:
        super().migrating(action)
        self.moves.append((action.job_id, self.now))


_spec = st.one_of(
    st.none(),
    st.builds(
        Checkpointing,
        st.sampled_from([None, 0.0, 40.0, 100.0, 300.0]),
        st.sampled_from([0.0, 20.0]),
        st.just("SIGUSR1"),
        st.sampled_from([0.0, 5.0, 30.0]),
    ),
)
_job = st.tuples(
    st.integers(1, 2),  # gpus
    st.floats(50, 1500, allow_nan=False).map(round),  # duration
    st.floats(0, 800, allow_nan=False).map(round),  # submit
    st.integers(0, 2),  # priority
    _spec,
    st.sampled_from(["A", "B", None]),  # pinned model
)


def _migration_case(
    models: list[str],
    jobs: list[tuple[int, float, float, int, Checkpointing | None, str | None]],
    min_runtime: float,
    max_moves: int,
    interval: float,
    upgrades: bool,
) -> tuple[list[Node], Workload, ProfileSpec]:
    """Nodes of the drawn models, the drawn jobs (every other one with speeds per model),
    and a profile that preempts and migrates."""
    nodes = [gpu_node(f"n{i}", gpus=2, model=m) for i, m in enumerate(models)]
    present = set(models)
    items = []
    for index, (gpus, duration, submit, priority, spec, pin) in enumerate(jobs):
        selector = None
        if pin is not None and pin in present:
            selector = f'device.attributes["model"] == "{pin}"'
        speed = JobSpeed({"A": 1.0, "B": 2.0}) if index % 2 else JobSpeed()
        items.append(
            WorkloadJob(
                job(
                    f"j{index}",
                    gpus=gpus,
                    priority=priority,
                    submit_time=submit,
                    checkpoint=spec,
                    selector=selector,
                    speed=speed,
                ),
                duration,
            )
        )
    profile = parse_profile(
        {
            "queue_sort": "priority",
            "post_filter": [
                {"name": "preemption", "args": {"grace_s": 5, "min_runtime_s": min_runtime}}
            ],
            "migration": {
                "min_runtime_s": min_runtime,
                "grace_s": 5,
                "defrag": {"enabled": True, "max_moves": max_moves, "min_interval_s": interval},
                "upgrade": {"enabled": upgrades, "min_speedup": 1.5},
            },
        }
    )
    return nodes, Workload(tuple(items)), profile


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    models=st.lists(st.sampled_from(["A", "B"]), min_size=2, max_size=4),
    jobs=st.lists(_job, min_size=2, max_size=12),
    min_runtime=st.sampled_from([30.0, 120.0]),
    max_moves=st.integers(1, 3),
    interval=st.sampled_from([0.0, 60.0]),
    upgrades=st.booleans(),
)
def test_migration_properties(
    models: list[str],
    jobs: list[tuple[int, float, float, int, Checkpointing | None, str | None]],
    min_runtime: float,
    max_moves: int,
    interval: float,
    upgrades: bool,
) -> None:
    nodes, workload, profile = _migration_case(
        models, jobs, min_runtime, max_moves, interval, upgrades
    )
    items = workload.jobs
    config = EngineConfig(tick_s=30, keep_ended_jobs=True)  # the core's books are read below
    sim = _Watched(nodes, workload, profile, config=config)
    result = sim.run()
    # every job ends
    assert all(o.state is JobState.SUCCEEDED for o in result.jobs), [
        (o.job_id, o.state, o.reason) for o in result.jobs
    ]
    # no job moves twice within its minimum runtime, nor before it has run that long
    for record in (sim.scheduler.record(i.job.id) for i in items):
        started: float | None = None
        for entry in record.history:
            if entry.cause.startswith("run "):
                started = entry.time
            elif entry.cause.startswith("migrating to"):
                assert started is not None and entry.time - started >= min_runtime
    # no preemption loop: a pair preempts at most once, never both ways
    pairs = sim.preempts
    assert len(pairs) == len(set(pairs))
    assert not {(b, a) for a, b in pairs} & set(pairs)
    # lost work never exceeds the interval for jobs that checkpoint periodically (nothing
    # for those that checkpoint continuously)
    specs = {i.job.id: i.job.checkpoint for i in items}
    for job_id, saving in sim.stops:
        spec = specs[job_id]
        if spec is not None and spec.interval_s is not None:
            assert saving.lost_s <= spec.interval_s + 1e-6, (job_id, spec, saving)


class _Keeping(Simulator):
    """Keeps the work of every ended job (its book is never told a job ended)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.work.forget = lambda job_id: None  # type: ignore[method-assign]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    models=st.lists(st.sampled_from(["A", "B"]), min_size=2, max_size=3),
    jobs=st.lists(_job, min_size=2, max_size=10),
    min_runtime=st.sampled_from([30.0, 120.0]),
    interval=st.sampled_from([0.0, 60.0]),
)
def test_an_ended_jobs_work_is_dropped_and_no_outcome_changes(
    models: list[str],
    jobs: list[tuple[int, float, float, int, Checkpointing | None, str | None]],
    min_runtime: float,
    interval: float,
) -> None:
    nodes, workload, profile = _migration_case(models, jobs, min_runtime, 2, interval, True)
    config = EngineConfig(tick_s=30)
    forgetting = Simulator(nodes, workload, profile, config=config)
    keeping = _Keeping(nodes, workload, profile, config=config)
    dropped, kept = forgetting.run(), keeping.run()
    assert list(dropped.jobs) == list(kept.jobs)
    totals = ("lost_work_s", "checkpoint_s", "migrations", "preemptions", "steps", "end_time")
    assert [getattr(dropped, n) for n in totals] == [getattr(kept, n) for n in totals]
    ids = [item.job.id for item in workload.jobs]
    # the jobs that run on work (every other job has speeds)
    tracked = [i.job.id for i in workload.jobs if i.job.speed.known or i.job.checkpoint]
    assert tracked
    # every job ended; the book that was told so holds nothing of any, the other all
    assert all(o.end is not None for o in dropped.jobs)
    assert [i for i in ids if forgetting.work.held(i)] == []
    assert [i for i in ids if keeping.work.held(i)] == tracked
