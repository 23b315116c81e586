"""A replay's memory does not grow with objects per job: outcomes live in columns, arrivals
enter the event heap one at a time, the core forgets ended jobs, and synthetic jobs are
built when read. None of it may change a number of the report."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from hetsched.drivers import EventOrder
from hetsched.framework.profile import parse_profile
from hetsched.model.lifecycle import JobState
from hetsched.sim.engine import EngineConfig, SimResult, Simulator
from hetsched.sim.metrics import finish_time_fairness, job_rows, summarize
from hetsched.sim.outcomes import JobOutcome, OutcomeTable, outcome_columns
from hetsched.sim.synthetic import SyntheticSpec, generate, split_gang
from hetsched.sim.workload import Workload, WorkloadJob

# -- the outcome table -------------------------------------------------------------------

OUTCOMES = [
    JobOutcome("a", "ann", "q0", 0, 1, 1, 10.0, 0.0),
    JobOutcome(
        "b",
        "bob",
        "q1",
        -(2**40),
        2,
        16,
        3600.5,
        12.25,
        state=JobState.SUCCEEDED,
        first_start=13.0,
        last_start=20.0,
        end=3640.5,
        run=2,
        finished_in_run=2,
        preemptions=1,
        restarts=1,
        lost_work_s=7.0,
        checkpoint_s=1.5,
        migrations=3,
        reason="preempted by c",
        demand_share=0.25,
        contenders=4,
    ),
    JobOutcome(
        "c",
        "ann",
        "q0",
        2**40,
        1,
        0,
        0.0,
        99.0,
        state=JobState.REJECTED,
        end=99.0,
        reason="job id c already exists",
    ),
    JobOutcome(
        "d", "cy", "q2", 1, 1, 1, 5.0, 1.0, state=JobState.RUNNING, first_start=1.0, last_start=1.0
    ),
]


def _table(outcomes: list[JobOutcome]) -> OutcomeTable:
    table = OutcomeTable(len(outcomes))
    for outcome in outcomes:
        table.add(outcome)
    return table


def test_a_table_gives_back_what_it_was_given() -> None:
    table = _table(OUTCOMES)
    assert len(table) == 4
    assert list(table) == OUTCOMES
    assert table[1] == OUTCOMES[1] and table[-1] == OUTCOMES[-1]
    assert table[1:3] == tuple(OUTCOMES[1:3])
    assert table == OUTCOMES and table == tuple(OUTCOMES)
    assert table != OUTCOMES[:3]
    assert table[0].first_start is None and table[0].wait_s is None
    assert table[1].jct_s == 3640.5 - 12.25
    with pytest.raises(IndexError):
        table[4]


def test_a_table_holds_no_more_rows_than_it_was_sized_for() -> None:
    table = _table(OUTCOMES[:1])
    with pytest.raises(IndexError, match="holds 1 jobs"):
        table.add(OUTCOMES[1])


def test_columns_are_views_in_workload_order() -> None:
    table = _table(OUTCOMES)
    cols = table.columns()
    assert [cols.users[u] for u in cols.user.tolist()] == ["ann", "bob", "ann", "cy"]
    assert [cols.states[s] for s in cols.state.tolist()] == [o.state for o in OUTCOMES]
    assert np.isnan(cols.first_start[0]) and cols.first_start[1] == 13.0
    table.end[3] = 50.0  # the engine writes the arrays; the columns see it
    assert cols.end[3] == 50.0
    built = outcome_columns(OUTCOMES)
    for name in ("submit", "duration_s", "demand_share", "contenders", "state", "user"):
        assert np.array_equal(getattr(built, name), getattr(cols, name)), name


def test_metrics_read_columns_and_objects_alike() -> None:
    fair = finish_time_fairness(OUTCOMES)
    assert fair == finish_time_fairness(_table(OUTCOMES))
    # bob: one 3628.25 s JCT against 3600.5 * max(1, 4 * 0.25)
    assert fair == {"bob": pytest.approx((3640.5 - 12.25) / 3600.5)}
    rows = list(job_rows(_table(OUTCOMES)))
    assert [r["id"] for r in rows] == ["a", "b", "c", "d"]
    assert rows[1]["reason"] == "" and rows[2]["reason"] == "job id c already exists"
    assert rows[3]["jct_s"] is None and rows[3]["wait_s"] == 0.0


# -- the engine ----------------------------------------------------------------------------

PREEMPTION = {
    "queue_sort": "priority",
    "post_filter": [{"name": "preemption", "args": {"grace_s": 5}}],
}

workloads = st.lists(
    st.tuples(
        st.integers(0, 60),  # submit
        st.integers(1, 50),  # duration
        st.sampled_from([1, 1, 2, 4]),  # GPUs
        st.integers(0, 2),  # priority
        st.sampled_from(["ann", "bob"]),
    ),
    min_size=1,
    max_size=25,
)


def _workload(rows: list[tuple[int, int, int, int, str]]) -> Workload:
    return Workload(
        tuple(
            WorkloadJob(job(f"j{i}", gpus=g, priority=p, user=u, submit_time=float(t)), float(d))
            for i, (t, d, g, p, u) in enumerate(rows)
        )
    )


def _run(workload: Workload, keep: bool, cancel: list[tuple[float, str]]) -> Simulator:
    nodes = [gpu_node("g0", gpus=4), gpu_node("g1", gpus=2)]
    config = EngineConfig(tick_s=10, keep_ended_jobs=keep)
    sim = Simulator(nodes, workload, parse_profile(PREEMPTION), 0, config, cancellations=cancel)
    return sim


def _same(a: SimResult, b: SimResult) -> None:
    assert a.jobs == b.jobs
    assert summarize(a) == summarize(b)
    for name in ("time", "queued", "running", "stranded"):
        assert list(getattr(a.series, name)) == list(getattr(b.series, name)), name
    assert {k: list(v) for k, v in a.series.used.items()} == {
        k: list(v) for k, v in b.series.used.items()
    }


@settings(max_examples=40, deadline=None, database=None)
@given(rows=workloads, cancels=st.lists(st.tuples(st.integers(0, 90), st.integers(0, 30))))
def test_forgetting_ended_jobs_changes_no_outcome(
    rows: list[tuple[int, int, int, int, str]], cancels: list[tuple[int, int]]
) -> None:
    workload = _workload(rows)
    cancel = [(float(t), f"j{i % len(rows)}") for t, i in cancels]
    kept_sim, dropped_sim = _run(workload, True, cancel), _run(workload, False, cancel)
    kept, dropped = kept_sim.run(), dropped_sim.run()
    _same(kept, dropped)
    assert len(kept_sim.scheduler.jobs) == len(rows)
    ended = {o.job_id for o in dropped.jobs if o.end is not None}
    assert not ended & set(dropped_sim.scheduler.jobs)


def test_the_agenda_holds_one_arrival_at_a_time() -> None:
    workload = _workload([(t % 7, 5, 1, 0, "ann") for t in range(40)])
    seen: list[int] = []
    sim = Simulator([gpu_node("g", gpus=2)], workload, config=EngineConfig(progress_every=1))
    sim._progress = lambda *_: seen.append(  # after every step
        sum(1 for entry in sim.loop.heap if entry[1] == EventOrder.ARRIVAL)
    )
    result = sim.run()
    assert seen and max(seen) <= 1
    assert all(o.state is JobState.SUCCEEDED for o in result.jobs)


def test_arrivals_come_in_time_order_and_ties_in_workload_order() -> None:
    # out of order in the file: j1 and j3 at t=0, j0 and j2 at t=5; one GPU, FIFO
    workload = _workload(
        [(5, 10, 1, 0, "ann"), (0, 10, 1, 0, "ann"), (5, 10, 1, 0, "ann"), (0, 10, 1, 0, "ann")]
    )
    result = Simulator([gpu_node("g", gpus=1)], workload).run()
    starts = {o.job_id: o.first_start for o in result.jobs}
    assert starts == {"j1": 0.0, "j3": 10.0, "j0": 20.0, "j2": 30.0}
    assert [o.job_id for o in result.jobs] == ["j0", "j1", "j2", "j3"]  # workload order


def test_a_duplicate_id_is_refused_before_the_run() -> None:
    workload = _workload([(0, 1, 1, 0, "ann"), (1, 1, 1, 0, "bob")])
    twice = Workload((workload.jobs[0], workload.jobs[0]))
    with pytest.raises(ValueError, match="duplicate job id 'j0'"):
        Simulator([gpu_node("g", gpus=1)], twice)


# -- synthetic jobs ------------------------------------------------------------------------


def test_synthetic_jobs_are_built_alike_on_every_read() -> None:
    spec = SyntheticSpec(jobs=300, users=5, queues=2, gpu_mix={1: 1, 16: 1}, seed=4)
    jobs = generate(spec).jobs
    assert len(jobs) == 300
    assert list(jobs) == [jobs[i] for i in range(300)]
    assert jobs[-1] == jobs[299] and jobs[10:12] == (jobs[10], jobs[11])
    with pytest.raises(IndexError):
        jobs[300]
    submits = [item.job.submit_time for item in jobs]
    assert submits == sorted(submits) and submits[0] == 0.0
    big = [item.job for item in jobs if item.job.replicas > 1]
    assert big and all(
        (j.replicas, j.resources.devices[0].primary.count) == split_gang(16, 8) for j in big
    )
    # one request object per shape, shared by every job of that shape
    assert len({id(item.job.resources) for item in jobs}) == 2
    for item in jobs:
        user = int(item.job.user.removeprefix("user"))
        assert item.job.queue == f"q{user % 2}" and item.job.id.startswith("s")
    assert generate(spec) == generate(spec)


def test_a_synthetic_replay_reports_what_a_materialized_one_does() -> None:
    spec = SyntheticSpec(jobs=200, rate_per_h=400.0, users=4, seed=2)
    lazy = generate(spec)
    eager = Workload(tuple(lazy.jobs), lazy.source)
    nodes = [gpu_node(f"g{i}", gpus=8) for i in range(3)]
    first = Simulator(nodes, lazy, config=EngineConfig(tick_s=60)).run()
    second = Simulator(nodes, eager, config=EngineConfig(tick_s=60)).run()
    _same(first, second)
    summary: dict[str, Any] = summarize(first).to_dict()
    assert summary["jobs"] == 200 and summary["wait_s"]["count"] == 200
    assert not math.isnan(summary["jct_s"]["mean"])
