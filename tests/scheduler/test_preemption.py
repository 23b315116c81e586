"""Preemption: victims chosen on a fork, safeguards, and no loops."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.job import Job, ResizeMode
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Bind,
    JobSubmitted,
    Kill,
    Migrate,
    MigrationKind,
    Preempt,
    Scheduler,
    TaskCheckpointed,
    TaskFinished,
    TaskStopped,
)


def _core(gpus: int = 8, nodes: int = 1, **args: Any) -> Scheduler:
    profile = parse_profile(
        {"queue_sort": "priority", "post_filter": [{"name": "preemption", "args": args}]}
    )
    return Scheduler(ClusterState([gpu_node(f"g{i}", gpus=gpus) for i in range(nodes)]), profile)


def _preempted(actions: list[Any]) -> list[str]:
    return sorted(a.job_id for a in actions if isinstance(a, Preempt))


def test_victims_lowest_priority_first_then_least_work_lost() -> None:
    core = _core(grace_s=7)
    core.handle(
        [
            JobSubmitted(job("p1", gpus=2, priority=1)),
            JobSubmitted(job("p0a", gpus=2, priority=0)),
            JobSubmitted(job("p0b", gpus=2, priority=0)),
            JobSubmitted(job("p2", gpus=2, priority=2)),
        ],
        0,
    )
    core.handle([TaskCheckpointed("p0b", 0, 1)], 50)  # p0b would lose 10 s, p0a 60 s
    actions = core.handle([JobSubmitted(job("hi", gpus=2, priority=5))], 60)
    assert _preempted(actions) == ["p0b"]
    preempt = next(a for a in actions if isinstance(a, Preempt))
    assert (preempt.grace_s, preempt.preemptor, preempt.kind) == (7, "hi", "priority")
    # the capacity stays held until the victim stops, then goes to the preemptor
    assert not [a for a in actions if isinstance(a, Bind)]
    actions = core.handle([TaskStopped("p0b", 0, 1)], 61)
    assert [a.job_id for a in actions if isinstance(a, Bind)] == ["hi"]
    assert core.record("p0b").state is JobState.PENDING
    assert core.record("p0b").explanation is not None


@pytest.mark.parametrize(
    ("victim", "now", "expected"),
    [
        (job("v", gpus=8, priority=0), 100, ["v"]),
        (job("v", gpus=8, priority=0, preemptible=False), 100, []),
        (job("v", gpus=8, priority=0), 5, []),  # younger than min_runtime_s
        (job("v", gpus=8, priority=5), 100, []),  # equal priority never preempted
        (job("v", gpus=8, priority=9), 100, []),
    ],
)
def test_safeguards(victim: Job, now: float, expected: list[str]) -> None:
    core = _core(min_runtime_s=10)
    core.handle([JobSubmitted(victim)], 0)
    actions = core.handle([JobSubmitted(job("hi", gpus=8, priority=5))], now)
    assert _preempted(actions) == expected
    explanation = core.record("hi").explanation
    if not expected:
        assert explanation is not None and "preemption" in str(explanation)


def test_never_preempts_when_the_preemptor_would_not_fit() -> None:
    # 2 nodes of 4: the 8-GPU job cannot fit on one node even if everything is preempted
    core = _core(gpus=4, nodes=2)
    core.handle([JobSubmitted(job("v", gpus=1, priority=0))], 0)
    actions = core.handle([JobSubmitted(job("hi", gpus=8, priority=5))], 10)
    assert _preempted(actions) == []
    assert core.record("hi").explanation is not None


def test_fewest_victims_among_equals() -> None:
    core = _core()
    core.handle(
        [JobSubmitted(job(f"s{i}", gpus=1, priority=0)) for i in range(4)]
        + [JobSubmitted(job("big", gpus=4, priority=0))],
        0,
    )
    actions = core.handle([JobSubmitted(job("hi", gpus=4, priority=5))], 10)
    assert _preempted(actions) == ["big"]


# -- properties over generated workloads -----------------------------------------------------

jobs_strategy = st.lists(
    st.tuples(
        st.integers(0, 3),  # priority
        st.integers(1, 8),  # gpus
        st.integers(1, 20),  # duration
        st.integers(0, 30),  # submit time
        st.booleans(),  # preemptible
        st.sampled_from([None, None, ResizeMode.CHECKPOINT, ResizeMode.LIVE]),  # elastic
    ),
    min_size=2,
    max_size=14,
)

Spec = tuple[int, int, int, int, bool, ResizeMode | None]


def _jobs(specs: list[Spec]) -> list[Job]:
    """The jobs of drawn (priority, gpus, duration, submit time, preemptible, elastic)
    tuples; an elastic job asks for its GPUs one per task, at least half of them."""
    return [
        job(
            f"j{i}",
            gpus=g if resize is None else 1,
            replicas=1 if resize is None else g,
            min_replicas=None if resize is None else max(1, g // 2),
            resize=resize or ResizeMode.CHECKPOINT,
            priority=p,
            estimated_runtime_s=float(d),
            submit_time=float(t),
            preemptible=pre,
        )
        for i, (p, g, d, t, pre, resize) in enumerate(specs)
    ]


def _conserved(core: Scheduler) -> None:
    """Capacity conservation: nothing is held twice or below zero, the ledger matches the
    allocations, and every running elastic job runs with a count within its bounds."""
    state = core.state
    assert set(core.ledger.by_key) == set(state.allocations)
    assert (state.cpu_free >= 0).all() and (state.dev_free >= 0).all()
    held = [d.device_id for p in state.allocations.values() for d in p.devices]
    assert len(held) == len(set(held)), "a device held twice"
    for record in core.elastic.values():
        job = record.job
        if record.state is JobState.RUNNING and job.min_replicas is not None:
            assert job.min_replicas <= record.count <= job.replicas
            ranks = sorted([*record.placements, *record.moving, *record.finished])
            assert ranks == list(range(len(ranks))) and len(ranks) <= record.count


@settings(max_examples=60, deadline=None)
@given(specs=jobs_strategy, grace=st.sampled_from([0.0, 1.0, 3.0]), nodes=st.integers(1, 2))
def test_generated_workloads_never_loop_and_every_preemption_lets_its_preemptor_start(
    specs: list[Spec], grace: float, nodes: int
) -> None:
    """Elastic jobs in the mix: a shrink for a job counts as a preemption (the same
    safeguards, each pair once), and capacity is conserved after every call."""
    min_runtime = 2.0
    core = _core(nodes=nodes, grace_s=grace, min_runtime_s=min_runtime)
    jobs = _jobs(specs)
    h = Harness(core, after=lambda now: _conserved(core))
    h.submit(jobs)
    h.run(until=2000.0)
    starts: dict[str, list[float]] = {}
    run_start: dict[tuple[str, int], float] = {}
    for t, a in h.actions(Bind):
        assert isinstance(a, Bind)
        starts.setdefault(a.job_id, []).append(t)
        run_start.setdefault((a.job_id, a.run), t)
    # (time, victim, run, preemptor): preemptions, shrinks through a restart (a Migrate
    # for a job) and live shrinks (Kills of the top ranks, once per shrink)
    stops: dict[tuple[float, str, int, str], None] = {}
    for t, a in h.log:
        if isinstance(a, Preempt):
            stops[(t, a.job_id, a.run, a.preemptor)] = None
        elif isinstance(a, Migrate) and a.for_job:
            assert a.kind is MigrationKind.RESIZE
            stops[(t, a.job_id, a.run, a.for_job)] = None
        elif isinstance(a, Kill) and "to make room for " in a.reason:
            stops[(t, a.job_id, a.run, a.reason.rsplit(" ", 1)[1])] = None
    pairs: set[tuple[str, str]] = set()
    for t, victim_id, run, preemptor_id in stops:
        pair = (preemptor_id, victim_id)
        assert pair not in pairs, "a job preempted twice by the same job"
        assert (victim_id, preemptor_id) not in pairs, "A preempted B and B preempted A"
        pairs.add(pair)
        victim = core.record(victim_id).job
        preemptor = core.record(preemptor_id).job
        assert victim.preemptible
        assert victim.priority < preemptor.priority
        assert t - run_start[(victim_id, run)] >= min_runtime
        # the preemptor starts once the victims have stopped, at the latest after the grace
        assert any(t <= s <= t + grace for s in starts.get(preemptor_id, []))
    # everything ends, and each pair preempts at most once, so a job is preempted at most
    # once per job of higher priority
    for record in core.jobs.values():
        assert record.state is JobState.SUCCEEDED
        higher = sum(1 for j in jobs if j.priority > record.job.priority)
        assert record.preemptions <= higher
    assert core.state.allocations == {}


@settings(max_examples=40, deadline=None)
@given(specs=jobs_strategy)
def test_every_pending_job_has_an_explanation(specs: list[Spec]) -> None:
    core = _core(nodes=1, grace_s=1.0)
    jobs = _jobs(specs)

    def check(now: float) -> None:
        for record in core.jobs.values():
            if record.state in (JobState.PENDING, JobState.REJECTED):
                assert record.explanation is not None and record.explanation.summary

    h = Harness(core, after=check)
    h.submit(jobs)
    h.run(until=2000.0)


def test_a_victim_chosen_again_before_its_last_run_stopped_releases_both_preemptors() -> None:
    """A preempted job may start again elsewhere while its last run is still stopping; a
    second preemptor may then choose it again. Each preemptor waits for it to stop, and
    neither waits for ever (the first used to stay nominated on it after it stopped)."""
    core = _core(gpus=1, nodes=2, grace_s=30)
    core.handle([JobSubmitted(job("v", gpus=1)), JobSubmitted(job("x", gpus=1, priority=1))], 0)
    actions = core.handle([JobSubmitted(job("a", gpus=1, priority=5))], 1)
    assert _preempted(actions) == ["v"]
    # x ends: v (pending, its run 1 still stopping) starts again on x's node
    actions = core.handle([TaskFinished("x", 0, 1)], 2)
    assert [a.job_id for a in actions if isinstance(a, Bind)] == ["v"]
    actions = core.handle([JobSubmitted(job("b", gpus=1, priority=9))], 3)
    assert _preempted(actions) == ["v"]
    core.handle([TaskStopped("v", 0, 1)], 4)  # the first run stops
    actions = core.handle([TaskStopped("v", 0, 2)], 5)  # and the second
    assert sorted(a.job_id for a in actions if isinstance(a, Bind)) == ["a", "b"]
    assert not core.record("a").nominated and not core.record("b").nominated
    # v waits for room; once a and b end it runs and ends without a trace left behind
    core.handle([TaskFinished("a", 0, 1), TaskFinished("b", 0, 1)], 6)
    core.handle([TaskFinished("v", 0, 3)], 7)
    assert core.record("v").state is JobState.SUCCEEDED
