"""Actions say everything: a JobTransition per history entry, Preempt names its tasks,
and a resubmitted job continues its runs and restarts."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.keys import TaskKey
from hetsched.model.device import Health
from hetsched.model.job import DeviceFailurePolicy, RestartPolicy
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Action,
    Bind,
    Change,
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    JobTransition,
    Kill,
    NodeRemoved,
    Preempt,
    Reject,
    Scheduler,
    TaskFinished,
    TaskStopped,
    Tick,
)


def changes(actions: list[Action], job_id: str | None = None) -> list[tuple[Any, ...]]:
    return [
        (a.job_id, a.source, a.target, a.change, a.run, a.restarts)
        for a in actions
        if isinstance(a, JobTransition) and (job_id is None or a.job_id == job_id)
    ]


P, R = JobState.PENDING, JobState.RUNNING


def test_a_job_s_life_as_transitions() -> None:
    core = Scheduler(ClusterState([gpu_node("g", gpus=1)]))
    spec = job("j", gpus=1, restart_policy=RestartPolicy.ON_FAILURE, max_restarts=1)
    first = core.handle([JobSubmitted(spec)], 0)
    assert changes(first) == [
        ("j", None, P, Change.SUBMITTED, 0, 0),
        ("j", P, R, Change.STARTED, 1, 0),
    ]
    started = next(a for a in first if isinstance(a, JobTransition) and a.target is R)
    assert (started.time, started.since) == (0, 0)
    failed = core.handle([TaskFinished("j", 0, 1, succeeded=False, reason="exit 3")], 10)
    assert changes(failed) == [
        ("j", R, P, Change.RESTARTED, 1, 1),
        ("j", P, R, Change.STARTED, 2, 1),
    ]
    restarted = next(a for a in failed if isinstance(a, JobTransition))
    assert restarted.since == 0 and restarted.cause == "task 0 failed: exit 3; restart 1/1"
    done = core.handle([TaskFinished("j", 0, 2)], 30)
    assert changes(done) == [("j", R, JobState.SUCCEEDED, Change.SUCCEEDED, 2, 1)]
    assert next(a for a in done if isinstance(a, JobTransition)).since == 10


def test_rejection_at_submit_comes_with_its_transition() -> None:
    profile = parse_profile({"flavors": ["gpu"], "queues": [{"name": "a", "nominal": {"gpu": 1}}]})
    core = Scheduler(ClusterState([gpu_node("g", gpus=1)]), profile)
    actions = core.handle([JobSubmitted(job("x", queue="nope"))], 0)
    assert changes(actions) == [("x", None, JobState.REJECTED, Change.REJECTED, 0, 0)]
    assert [type(a) for a in actions] == [JobTransition, Reject]
    # a duplicate id is a Reject alone: the job already known is unchanged
    core.handle([JobSubmitted(job("y", queue="a"))], 1)
    again = core.handle([JobSubmitted(job("y", queue="a"))], 2)
    assert [type(a) for a in again] == [Reject]


def test_lost_node_requeues_with_released_kills() -> None:
    core = Scheduler(ClusterState([gpu_node("a", gpus=1), gpu_node("b", gpus=1)]))
    core.handle([JobSubmitted(job("j", gpus=1, replicas=2, gang=2))], 0)
    actions = core.handle([NodeRemoved("a")], 5)
    kills = [(a.task, a.released) for a in actions if isinstance(a, Kill)]
    assert kills == [(0, True), (1, False)]
    assert changes(actions) == [("j", R, P, Change.LOST, 1, 0)]


def test_device_failure_policy_fail_ends_the_job() -> None:
    core = Scheduler(ClusterState([gpu_node("a", gpus=1)]))
    spec = job("j", gpus=1, on_device_failure=DeviceFailurePolicy.FAIL)
    core.handle([JobSubmitted(spec)], 0)
    actions = core.handle([DeviceHealthChanged("a/gpu0", Health.UNHEALTHY, "XID 79")], 3)
    assert changes(actions) == [("j", R, JobState.FAILED, Change.FAILED, 1, 0)]


def test_preempt_names_the_tasks_it_stops_and_the_requeue() -> None:
    profile = parse_profile({"queue_sort": "priority", "post_filter": ["preemption"]})
    core = Scheduler(ClusterState([gpu_node("g", gpus=2)]), profile)
    core.handle([JobSubmitted(job("lo", gpus=1, replicas=2, gang=1))], 0)
    actions = core.handle([JobSubmitted(job("hi", gpus=2, priority=9))], 10)
    (preempt,) = [a for a in actions if isinstance(a, Preempt)]
    assert (preempt.job_id, preempt.run, preempt.tasks) == ("lo", 1, (0, 1))
    assert changes(actions, "lo") == [("lo", R, P, Change.PREEMPTED, 1, 0)]
    requeue = next(a for a in actions if isinstance(a, JobTransition) and a.job_id == "lo")
    assert actions.index(preempt) < actions.index(requeue)


def test_a_resubmitted_job_continues_its_runs_and_restarts() -> None:
    core = Scheduler(ClusterState([gpu_node("g", gpus=1)]))
    spec = job("j", gpus=1, restart_policy=RestartPolicy.ON_FAILURE, max_restarts=2)
    actions = core.handle([JobSubmitted(spec, run=4, restarts=2)], 0)
    (bind,) = [a for a in actions if isinstance(a, Bind)]
    assert bind.run == 5
    assert changes(actions)[-1] == ("j", P, R, Change.STARTED, 5, 2)
    # its restarts are used up: the next failure ends it
    failed = core.handle([TaskFinished("j", 0, 5, succeeded=False)], 1)
    assert changes(failed) == [("j", R, JobState.FAILED, Change.FAILED, 5, 2)]


# -- property: the transitions are the history, and stops are what Preempt and Kill say --

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 3), st.integers(0, 9), st.booleans()),
        st.tuples(st.just("finish"), st.integers(0, 20), st.booleans(), st.just(False)),
        st.tuples(st.just("cancel"), st.integers(0, 20), st.just(0), st.just(False)),
        st.tuples(st.just("stop"), st.integers(0, 5), st.just(0), st.just(False)),
        st.tuples(st.just("health"), st.integers(0, 5), st.booleans(), st.just(False)),
        st.tuples(st.just("tick"), st.just(0), st.just(0), st.just(False)),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(_ops)
def test_transitions_replay_every_job_s_history(script: list[tuple[str, int, Any, bool]]) -> None:
    profile = parse_profile(
        {
            "queue_sort": "priority",
            "post_filter": ["preemption"],
            "gang": {"timeout_s": 3},
            "timeouts": {"max_pending_s": 15},
        }
    )
    core = Scheduler(ClusterState([gpu_node("g0", gpus=2), gpu_node("g1", gpus=2)]), profile)
    devices = [d.id for n in core.state.nodes for d in n.devices]
    said: dict[str, list[JobTransition]] = {}
    stopping: set[TaskKey] = set()
    ids: list[str] = []
    for now, (op, a, b, flag) in enumerate(script, start=1):
        events: list[Event] = []
        if op == "submit":
            ids.append(f"j{len(ids)}")
            policy = RestartPolicy.ON_FAILURE if flag else RestartPolicy.NEVER
            spec = job(ids[-1], gpus=1, replicas=a, priority=b, restart_policy=policy)
            events.append(JobSubmitted(spec))
        elif op == "finish" and ids:
            record = core.jobs[ids[a % len(ids)]]
            for task in sorted(record.placements)[:1]:
                events.append(TaskFinished(record.id, task, record.run, succeeded=bool(b)))
        elif op == "cancel" and ids:
            events.append(JobCancelled(ids[a % len(ids)]))
        elif op == "stop" and stopping:
            key = sorted(stopping)[a % len(stopping)]
            stopping.discard(key)
            events.append(TaskStopped(*key))
        elif op == "health":
            health = Health.HEALTHY if b else Health.UNHEALTHY
            events.append(DeviceHealthChanged(devices[a % len(devices)], health))
        actions = core.handle(events or [Tick()], float(now))
        for action in actions:
            if isinstance(action, JobTransition):
                said.setdefault(action.job_id, []).append(action)
            elif isinstance(action, Preempt):
                keys = {TaskKey(action.job_id, t, action.run) for t in action.tasks}
                # the tasks a Preempt names are exactly those the core now holds as stopping
                assert keys <= set(core.jobs[action.job_id].stopping)
                stopping |= keys
            elif isinstance(action, Kill) and not action.released:
                stopping.add(TaskKey(action.job_id, action.task, action.run))
    for job_id, record in core.jobs.items():
        told = said.get(job_id, [])
        assert [(t.time, t.source, t.target, t.cause) for t in told] == [
            (h.time, h.source, h.target, h.cause) for h in record.history
        ]
        if told:
            assert (told[-1].run, told[-1].restarts) == (record.run, record.restarts)
