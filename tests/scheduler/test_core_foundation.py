"""The core's contract: events in, actions out; runs, acknowledged stops, explanations."""

from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cpu_node, gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.status import Code
from hetsched.keys import TaskKey
from hetsched.model.device import Health, Taint
from hetsched.model.job import RestartPolicy
from hetsched.model.lifecycle import JobState
from hetsched.queueing.waiting import WaitingQueue
from hetsched.scheduler import (
    Action,
    Bind,
    DeviceHealthChanged,
    JobCancelled,
    JobSubmitted,
    Kill,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    Pending,
    Reject,
    Scheduler,
    TaskFinished,
    TaskStopped,
)


def binds(actions: Sequence[Action]) -> dict[str, Bind]:
    return {a.job_id: a for a in actions if isinstance(a, Bind)}


def two_nodes() -> Scheduler:
    return Scheduler(ClusterState([gpu_node("g", gpus=4), cpu_node("c")]))


def test_fifo_binds_in_order_and_later_jobs_may_pass() -> None:
    core = two_nodes()
    actions = core.handle(
        [
            JobSubmitted(job("a", gpus=3)),
            JobSubmitted(job("b", gpus=2)),  # does not fit after a
            JobSubmitted(job("c", gpus=1)),  # passes b
        ],
        now=0,
    )
    assert list(binds(actions)) == ["a", "c"]
    pending = [a for a in actions if isinstance(a, Pending)]
    assert [p.job_id for p in pending] == ["b"]
    assert core.record("b").state is JobState.PENDING


def test_finish_releases_and_unblocks_the_waiting_job() -> None:
    core = two_nodes()
    first = binds(core.handle([JobSubmitted(job("a", gpus=4)), JobSubmitted(job("b", gpus=2))], 0))
    assert list(first) == ["a"]
    run = first["a"].run
    assert run == 1
    second = binds(core.handle([TaskFinished("a", 0, run)], 10))
    assert list(second) == ["b"]
    assert core.record("a").state is JobState.SUCCEEDED
    assert [t.target for t in core.record("a").history] == [
        JobState.PENDING,
        JobState.RUNNING,
        JobState.SUCCEEDED,
    ]


def test_gang_is_all_or_nothing() -> None:
    core = Scheduler(ClusterState([gpu_node("g0", gpus=4), gpu_node("g1", gpus=4)]))
    actions = core.handle([JobSubmitted(job("gang", gpus=3, replicas=3))], 0)
    assert not binds(actions)
    assert core.state.allocations == {}  # nothing half-held
    explanation = core.record("gang").explanation
    assert explanation is not None and "only 2 of the 3 tasks" in explanation.summary


def test_gang_minimum_below_replicas_starts_the_rest_later() -> None:
    core = Scheduler(ClusterState([gpu_node("g0", gpus=4)]))
    core.handle([JobSubmitted(job("filler", gpus=2))], 0)
    first = binds(core.handle([JobSubmitted(job("elastic", gpus=1, replicas=4, gang=2))], 1))
    assert [t for t, _ in first["elastic"].placements] == [0, 1]
    more = binds(core.handle([TaskFinished("filler", 0, 1)], 2))
    assert [t for t, _ in more["elastic"].placements] == [2, 3]
    assert more["elastic"].run == first["elastic"].run == 1


def test_failed_task_restarts_with_a_new_run_and_stale_reports_are_ignored() -> None:
    core = two_nodes()
    spec = job("r", gpus=1, replicas=2, restart_policy=RestartPolicy.ON_FAILURE, max_restarts=1)
    core.handle([JobSubmitted(spec)], 0)
    actions = core.handle([TaskFinished("r", 0, 1, succeeded=False, reason="exit 3")], 5)
    kills = [a for a in actions if isinstance(a, Kill)]
    assert [(k.task, k.run) for k in kills] == [(1, 1)]
    # task 1 of run 1 still holds its GPU until it is reported stopped
    assert TaskKey("r", 1, 1) in core.state.allocations
    # the freed GPU plus the two idle ones hold the restarted run at once
    assert binds(actions)["r"].run == 2
    core.handle([TaskStopped("r", 1, 1)], 6)
    assert TaskKey("r", 1, 1) not in core.state.allocations
    record = core.record("r")
    assert record.run == 2 and record.state is JobState.RUNNING
    # a late success from run 1 must not count for run 2
    core.handle([TaskFinished("r", 1, 1)], 7)
    assert record.finished == set()
    assert "restart 1/1" in record.story()[2]


def test_cancel_keeps_devices_until_stopped() -> None:
    core = two_nodes()
    core.handle([JobSubmitted(job("a", gpus=4))], 0)
    actions = core.handle([JobCancelled("a"), JobSubmitted(job("b", gpus=4))], 1)
    assert [a.task for a in actions if isinstance(a, Kill)] == [0]
    assert "b" not in binds(actions)  # the GPUs are still held by a's stopping task
    assert core.record("a").state is JobState.CANCELLED
    assert "b" in binds(core.handle([TaskStopped("a", 0, 1)], 2))


def test_node_loss_frees_at_once_and_requeues() -> None:
    core = Scheduler(ClusterState([gpu_node("g0", gpus=2), gpu_node("g1", gpus=2)]))
    bound = binds(core.handle([JobSubmitted(job("a", gpus=2))], 0))["a"]
    node = bound.placements[0][1].node
    actions = core.handle([NodeRemoved(node, "node failed")], 3)
    assert [a.task for a in actions if isinstance(a, Kill)] == [0]
    again = binds(actions)["a"]
    assert again.run == 2 and again.placements[0][1].node != node
    assert "node failed" in core.record("a").story()[2]


def test_unhealthy_device_stops_its_task_and_gets_no_new_work() -> None:
    core = Scheduler(ClusterState([gpu_node("g0", gpus=1)]))
    core.handle([JobSubmitted(job("a", gpus=1))], 0)
    actions = core.handle([DeviceHealthChanged("g0/gpu0", Health.UNHEALTHY)], 1)
    assert any(isinstance(a, Kill) for a in actions) and not binds(actions)
    assert core.record("a").state is JobState.PENDING
    assert "b" not in binds(core.handle([JobSubmitted(job("b", gpus=1))], 2))
    healed = binds(core.handle([DeviceHealthChanged("g0/gpu0", Health.HEALTHY)], 3))
    assert set(healed) == {"a"}


def test_new_node_lets_an_unresolvable_job_start() -> None:
    core = Scheduler(ClusterState([cpu_node("c")]))
    actions = core.handle([JobSubmitted(job("g", gpus=8))], 0)
    pending = [a for a in actions if isinstance(a, Pending)]
    assert pending[0].explanation.code is Code.UNRESOLVABLE
    assert not binds(core.handle([], 1))
    assert "g" in binds(core.handle([NodeAdded(gpu_node("g0", gpus=8))], 2))


def test_duplicate_job_id_is_rejected() -> None:
    core = two_nodes()
    core.handle([JobSubmitted(job("a"))], 0)
    actions = core.handle([JobSubmitted(job("a"))], 1)
    assert actions == [Reject("a", "job id a already exists")]


def test_explanation_suggests_what_would_fit() -> None:
    core = Scheduler(ClusterState([gpu_node("g", gpus=4, model="T4")]))
    selector = 'device.attributes["model"] == "A100"'
    actions = core.handle([JobSubmitted(job("sel", gpus=2, selector=selector))], 0)
    explanation = next(a for a in actions if isinstance(a, Pending)).explanation
    assert explanation.suggestions == ("without the selector on gpu",)
    core2 = Scheduler(ClusterState([gpu_node("g", gpus=2)]))
    explanation2 = next(
        a for a in core2.handle([JobSubmitted(job("big", gpus=4))], 0) if isinstance(a, Pending)
    ).explanation
    assert explanation2.suggestions == ("2 gpu instead of 4",)
    assert any("want 4x gpu" in line for line in explanation2.lines())


def test_pending_is_announced_once_per_explanation() -> None:
    core = two_nodes()
    core.handle([JobSubmitted(job("a", gpus=4))], 0)
    first = core.handle([JobSubmitted(job("b", gpus=1))], 1)
    assert [a.job_id for a in first if isinstance(a, Pending)] == ["b"]
    assert [a for a in core.handle([JobSubmitted(job("c"))], 2) if isinstance(a, Pending)] == []


# -- properties ------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"), st.integers(0, 4), st.integers(1, 3), st.sampled_from([250, 1000])
        ),
        st.tuples(st.just("finish"), st.integers(0, 30), st.booleans(), st.just(0)),
        st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0), st.just(0)),
        st.tuples(st.just("stop"), st.just(0), st.just(0), st.just(0)),
        st.tuples(st.just("health"), st.integers(0, 5), st.booleans(), st.just(0)),
    ),
    max_size=40,
)


Script = list[tuple[str, int, object, int]]


def drive(core: Scheduler, script: Script) -> Iterator[tuple[list[str], list[Action]]]:
    """Feed the core one call per scripted operation; yields (submitted ids, actions)."""
    devices = [d.id for n in core.state.nodes for d in n.devices]
    submitted: list[str] = []
    kills: list[Kill] = []
    now = 0.0
    for op, a, b, c in script:
        now += 1
        events: list[object] = []
        if op == "submit":
            job_id = f"j{len(submitted)}"
            submitted.append(job_id)
            gpus, share = (1, c) if a <= 1 else (a, 1000)
            spec = job(job_id, cpu=1000, gpus=gpus, share=share, replicas=int(b))  # type: ignore[call-overload]
            events.append(JobSubmitted(spec))
        elif op == "finish" and submitted:
            record = core.jobs[submitted[a % len(submitted)]]
            if record.placements:
                task = sorted(record.placements)[0]
                events.append(TaskFinished(record.id, task, record.run, succeeded=bool(b)))
        elif op == "cancel" and submitted:
            events.append(JobCancelled(submitted[a % len(submitted)]))
        elif op == "stop" and kills:
            k = kills.pop(0)
            events.append(TaskStopped(k.job_id, k.task, k.run))
        elif op == "health":
            health = Health.HEALTHY if b else Health.UNHEALTHY
            events.append(DeviceHealthChanged(devices[a % len(devices)], health))
        actions = core.handle(events, now)  # type: ignore[arg-type]
        kills += [x for x in actions if isinstance(x, Kill)]
        yield submitted, actions


def small_core() -> Scheduler:
    return Scheduler(
        ClusterState([gpu_node("g0", gpus=4, cpu=8000), gpu_node("g1", gpus=2, cpu=8000)])
    )


@settings(max_examples=80, deadline=None)
@given(ops)
def test_random_event_streams_keep_the_books_straight(script: Script) -> None:
    core = small_core()
    submitted: list[str] = []
    for ids, _ in drive(core, script):
        submitted = ids
        # the books: every allocation belongs to a running task or a stopping one, and back
        held = {
            TaskKey(r.id, t, r.run): p for r in core.jobs.values() for t, p in r.placements.items()
        }
        for r in core.jobs.values():
            held.update(r.stopping)
        assert held == core.state.allocations
        s = core.state
        assert (s.dev_free >= 0).all() and (s.dev_free <= 1000).all()
        assert (s.cpu_free >= 0).all() and (s.cpu_free <= s.cpu_cap).all()
        # the waiting index agrees with a scan of every job
        scan = [
            r
            for r in core.jobs.values()
            if r.state is JobState.PENDING or (r.state is JobState.RUNNING and r.has_unplaced)
        ]
        assert core.waiting() == scan
        for r in core.jobs.values():
            if r.state is JobState.PENDING:
                assert r.explanation is None or r.explanation.lines()
            if r.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
                assert not r.placements
    assert set(core.jobs) == set(submitted)  # no accepted job lost


@settings(max_examples=80, deadline=None)
@given(ops)
def test_skipping_retries_where_no_room_appeared_changes_no_decision(script: Script) -> None:
    """The cycle skips a job when no node that gained room since its shape failed holds it;
    a core that attempts every waiting job after every change must bind exactly the same,
    and so must one that attempts every waiting job in every cycle (the full-sort cycle)."""
    fast = [
        [a for a in actions if isinstance(a, Bind | Kill)]
        for _, actions in drive(small_core(), script)
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WaitingQueue, "_room", lambda *args: True)
        slow = [
            [a for a in actions if isinstance(a, Bind | Kill)]
            for _, actions in drive(small_core(), script)
        ]
    assert fast == slow
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WaitingQueue, "parked", lambda *args: False)
        core = small_core()
        core.use_reference_cycle()
        slowest = [
            [a for a in actions if isinstance(a, Bind | Kill)] for _, actions in drive(core, script)
        ]
    assert fast == slowest


@pytest.mark.parametrize("replicas", [1, 3])
def test_every_waiting_job_has_an_explanation(replicas: int) -> None:
    core = Scheduler(ClusterState([gpu_node("g", gpus=2)]))
    core.handle(
        [JobSubmitted(job("a", gpus=2)), JobSubmitted(job("b", gpus=1, replicas=replicas))], 0
    )
    explanation = core.record("b").explanation
    assert explanation is not None and explanation.lines() and explanation.rejections


def test_node_change_keeps_what_runs_and_reopens_placement() -> None:
    # a node tainted NoSchedule keeps its task and takes no new one; untainted, the job
    # waiting for room is tried again at once, with no capacity freed
    core = Scheduler(ClusterState([gpu_node("g0", gpus=2)]))
    core.handle([JobSubmitted(job("a", gpus=1))], 0)
    cordon = (Taint("cordoned"),)
    actions = core.handle([NodeChanged("g0", taints=cordon), JobSubmitted(job("b", gpus=1))], 1)
    assert not any(isinstance(a, Kill) for a in actions) and "b" not in binds(actions)
    assert core.record("a").state is JobState.RUNNING
    assert "taint" in str(core.record("b").explanation)
    assert "b" in binds(core.handle([NodeChanged("g0", taints=())], 2))
    # labels change what a node selector matches
    core.handle([NodeChanged("g0", labels={"zone": "x"})], 3)
    assert core.state.nodes[0].labels == {"zone": "x"}
    assert core.state.nodes[0].taints == ()
