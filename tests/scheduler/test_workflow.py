"""Dependencies and arrays in the core: held jobs, cascades of unmet dependencies, arrays
created a window at a time (hand-computed outcomes)."""

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.lifecycle import TERMINAL, JobState
from hetsched.model.workflow import Dependency, Needs, OnUnmet, parse_array
from hetsched.scheduler import (
    Action,
    Bind,
    Event,
    JobCancelled,
    JobSubmitted,
    JobTransition,
    Kill,
    Pending,
    Scheduler,
    TaskFinished,
    TaskStopped,
    Tick,
)
from hetsched.scheduler.arrays import WINDOW


def core(gpus: int = 8) -> Scheduler:
    return Scheduler(ClusterState([gpu_node("g", gpus=gpus)]))


def bound(actions: Sequence[Action]) -> list[str]:
    return [a.job_id for a in actions if isinstance(a, Bind)]


def ends(actions: Sequence[Action]) -> dict[str, tuple[JobState, str]]:
    return {
        a.job_id: (a.target, a.cause)
        for a in actions
        if isinstance(a, JobTransition) and a.target not in (JobState.PENDING, JobState.RUNNING)
    }


def after(*names: str, needs: Needs = Needs.SUCCEEDED) -> tuple[Dependency, ...]:
    return tuple(Dependency(n, needs) for n in names)


def finish(sched: Scheduler, job_id: str, now: float, ok: bool = True) -> list[Action]:
    run = sched.record(job_id).run
    return sched.handle([TaskFinished(job_id, 0, run, ok)], now)


def diamond(sched: Scheduler, **kwargs: object) -> list[Action]:
    return sched.handle(
        [
            JobSubmitted(job("a", gpus=1)),
            JobSubmitted(job("b", gpus=1, after=after("a"), **kwargs)),
            JobSubmitted(job("c", gpus=1, after=after("a"))),
            JobSubmitted(job("d", gpus=1, after=after("b", "c"))),
        ],
        0,
    )


def test_a_diamond_runs_in_dependency_order() -> None:
    sched = core()
    actions = diamond(sched)
    assert bound(actions) == ["a"]
    # held jobs are pending, outside the queue and the counts
    assert [r.id for r in sched.waiting()] == []
    assert sched.view.counts()[0].get("default", 0) == 0
    assert str(sched.record("d").explanation).startswith("waiting for b (pending), c (pending)")
    assert str(sched.record("b").explanation) == "waiting for a (running)"
    assert bound(finish(sched, "a", 10)) == ["b", "c"]
    assert sched.record("b").queued_since == 10  # its queue time starts at its release
    assert bound(finish(sched, "b", 20)) == []
    assert str(sched.record("d").explanation) == "waiting for c (running)"
    actions = finish(sched, "c", 30)
    assert bound(actions) == ["d"]
    released = [a for a in actions if isinstance(a, JobTransition) and a.job_id == "d"]
    assert released[0].cause == "dependencies met: b succeeded, c succeeded"
    assert bound(finish(sched, "d", 40)) == []
    assert sched.record("d").state is JobState.SUCCEEDED


def test_a_failure_cancels_its_dependents_down_the_chain() -> None:
    sched = core()
    diamond(sched)
    sched.handle([JobSubmitted(job("e", gpus=1, after=after("a", needs=Needs.FAILED)))], 1)
    actions = finish(sched, "a", 10, ok=False)
    assert ends(actions) == {
        "a": (JobState.FAILED, "task 0 failed"),
        "b": (JobState.CANCELLED, "a failed"),
        "c": (JobState.CANCELLED, "a failed"),
        "d": (JobState.CANCELLED, "b cancelled; c cancelled"),
    }
    assert bound(actions) == ["e"]  # it waited for a failure


def test_on_unmet_keep_stays_pending_and_says_why() -> None:
    sched = core()
    diamond(sched, on_unmet=OnUnmet.KEEP)
    actions = finish(sched, "a", 10, ok=False)
    assert "b" not in ends(actions)
    assert ends(actions)["d"] == (JobState.CANCELLED, "c cancelled")
    assert sched.record("b").state is JobState.PENDING
    assert str(sched.record("b").explanation).startswith("can never start: a failed")
    sched.handle([JobCancelled("b")], 11)
    assert sched.record("b").state is JobState.CANCELLED


def test_a_dependency_on_a_running_job_says_how_far_it_got() -> None:
    sched = core()
    sched.handle(
        [
            JobSubmitted(job("etl-2", gpus=1, replicas=5)),
            JobSubmitted(job("train", after=after("etl-2"))),
        ],
        0,
    )
    run = sched.record("etl-2").run
    # recorded when etl-2 started; how far it got is worked out when asked
    assert str(sched.record("train").explanation) == "waiting for etl-2 (running, 0 of 5 done)"
    actions = sched.handle([TaskFinished("etl-2", t, run) for t in range(3)], 5)
    assert not [a for a in actions if isinstance(a, Pending) and a.job_id == "train"]
    explained = sched.view.waiting_for("train")
    assert explained is not None
    assert explained.summary == "waiting for etl-2 (running, 3 of 5 done)"
    assert sched.view.waiting_for("etl-2") is None


def test_a_held_jobs_maximum_pending_time_starts_at_its_release() -> None:
    profile = parse_profile({"timeouts": {"max_pending_s": 50}})
    sched = Scheduler(ClusterState([gpu_node("g", gpus=1)]), profile=profile)
    actions = sched.handle(
        [
            JobSubmitted(job("hog", gpus=1)),  # holds the one GPU throughout
            JobSubmitted(job("a")),
            JobSubmitted(job("b", gpus=1, after=after("a"))),
            JobSubmitted(job("c", gpus=1)),  # in the queue: its clock runs from 0
        ],
        0,
    )
    assert bound(actions) == ["hog", "a"]
    assert sched.next_wakeup() == 50  # c's limit; b, held, has none
    late = "pending longer than the maximum of 50s; last reason: no node fits a task now"
    assert ends(sched.handle([Tick()], 51)) == {"c": (JobState.REJECTED, f"{late} (0 of 1 node)")}
    assert sched.record("b").state is JobState.PENDING  # held 51 s, not rejected
    assert bound(finish(sched, "a", 80)) == []  # released: b waits from 80
    assert sched.record("b").queued_since == 80
    assert sched.next_wakeup() == 130
    assert ends(sched.handle([Tick()], 129)) == {}
    assert ends(sched.handle([Tick()], 131)) == {"b": (JobState.REJECTED, f"{late} (0 of 1 node)")}


def test_an_array_with_a_cap_runs_that_many_at_once() -> None:
    sched = core()
    spec = parse_array("0-9%3")
    actions = sched.handle([JobSubmitted(job("x", gpus=1, array=spec))], 0)
    assert bound(actions) == ["x[0]", "x[1]", "x[2]"]
    assert sched.record("x").state is JobState.RUNNING
    assert sched.record("x[1]").job.array_index == 1
    assert bound(finish(sched, "x[1]", 1)) == ["x[3]"]
    now = 2.0
    while sched.record("x").state is JobState.RUNNING:
        running = [r.id for r in sched.active_jobs() if r.state is JobState.RUNNING]
        assert len(running) <= 3
        for job_id in running:
            finish(sched, job_id, now)
            now += 1
    assert sched.record("x").state is JobState.SUCCEEDED
    assert sched.record("x").history[-1].cause == "all 10 elements succeeded"


def test_an_element_failing_fails_the_array_and_its_dependents() -> None:
    sched = core()
    spec = parse_array("1-7:2")
    sched.handle(
        [
            JobSubmitted(job("x", gpus=1, array=spec)),
            JobSubmitted(job("y", after=after("x"))),
        ],
        0,
    )
    assert sorted(r.id for r in sched.active_jobs()) == ["x[1]", "x[3]", "x[5]", "x[7]"]
    finish(sched, "x[1]", 1)
    finish(sched, "x[3]", 2, ok=False)
    finish(sched, "x[5]", 3)
    actions = finish(sched, "x[7]", 4)
    assert ends(actions) == {
        "x[7]": (JobState.SUCCEEDED, "all tasks succeeded"),
        "x": (JobState.FAILED, "1 of 4 elements did not succeed: 3"),
        "y": (JobState.CANCELLED, "x failed"),
    }


def test_a_dependency_on_an_array_waits_for_all_its_elements() -> None:
    sched = core(gpus=2)
    sched.handle(
        [
            JobSubmitted(job("x", gpus=1, array=parse_array("0-3"))),
            JobSubmitted(job("y", gpus=1, after=after("x"))),
        ],
        0,
    )
    assert str(sched.record("y").explanation) == "waiting for x (running, 0 of 4 done)"
    assert bound(finish(sched, "x[0]", 1)) == ["x[2]"]
    assert str(sched.view.waiting_for("y")) == "waiting for x (running, 1 of 4 done)"
    assert bound(finish(sched, "x[1]", 2)) == ["x[3]"]
    assert bound(finish(sched, "x[2]", 3)) == []
    assert bound(finish(sched, "x[3]", 4)) == ["y"]


def test_elements_are_created_a_window_at_a_time() -> None:
    sched = core(gpus=8)
    big = parse_array("0-99999")
    actions = sched.handle([JobSubmitted(job("x", gpus=1, array=big))], 0)
    assert len(bound(actions)) == 8
    # 8 started, and a window waits: the rest are not records yet
    assert len(sched.jobs) == 1 + 8 + WINDOW
    assert len(sched.waiting()) == WINDOW


def test_cancel_one_element_and_then_the_array() -> None:
    sched = core(gpus=1)
    sched.handle([JobSubmitted(job("x", gpus=1, array=parse_array("0-3%1")))], 0)
    actions = sched.handle([JobCancelled("x[2]")], 1)  # not created yet
    assert ends(actions) == {"x[2]": (JobState.CANCELLED, "cancelled by user")}
    assert bound(finish(sched, "x[0]", 2)) == ["x[1]"]
    assert bound(finish(sched, "x[1]", 3)) == ["x[3]"]  # x[2] is skipped
    actions = sched.handle([JobCancelled("x")], 4)
    assert ends(actions) == {
        "x": (JobState.CANCELLED, "cancelled by user"),
        "x[3]": (JobState.CANCELLED, "its array was cancelled"),
    }


def test_an_element_its_array_ends_without_creating_is_cancelled_for_its_waiters() -> None:
    sched = core(gpus=1)
    sched.handle(
        [
            JobSubmitted(job("x", gpus=1, array=parse_array("0-9%1"))),
            JobSubmitted(job("w5", after=after("x[5]"))),
            JobSubmitted(job("w5e", after=after("x[5]", needs=Needs.ENDED))),
            JobSubmitted(job("w0", after=after("x[0]"))),
        ],
        0,
    )
    assert str(sched.record("w5").explanation) == "waiting for x[5] (not created yet)"
    assert str(sched.view.waiting_for("w5e")) == "waiting for x[5] (not created yet; needs ended)"
    assert bound(finish(sched, "x[0]", 1)) == ["w0", "x[1]"]
    actions = sched.handle([JobCancelled("x")], 2)  # x[5] will never exist now
    assert ends(actions) == {
        "x": (JobState.CANCELLED, "cancelled by user"),
        "x[1]": (JobState.CANCELLED, "its array was cancelled"),
        "w5": (JobState.CANCELLED, "x[5] cancelled"),
    }
    assert bound(actions) == ["w5e"]
    released = [a for a in actions if isinstance(a, JobTransition) and a.job_id == "w5e"]
    assert released[0].cause == "dependencies met: x[5] cancelled"


def test_an_array_and_its_dependent_are_taken_back_after_a_restart() -> None:
    before = core(gpus=2)
    x = job("x", gpus=1, array=parse_array("0-3%2"))
    before.handle([JobSubmitted(x)], 0)
    finish(before, "x[0]", 1)  # x[2] starts
    running = {i: before.record(f"x[{i}]") for i in (1, 2)}
    # the driver restarts: its store knows x[0] succeeded and x[1], x[2] run
    after_ = core(gpus=2)
    for record in running.values():
        after_.restore(record.job, record.run, record.placements, now=2)
    after_.known_elements("x", {0: JobState.SUCCEEDED}, [1, 2])
    after_.known_end("w1", JobState.SUCCEEDED, "w")  # ended before the restart
    y = job("y", gpus=1, after=after("x", "w1"))
    actions = after_.handle(
        [TaskFinished("x[1]", 0, running[1].run), JobSubmitted(x), JobSubmitted(y)], 3
    )
    assert bound(actions) == ["x[3]"]  # x[0..2] are not created again
    assert after_.record("x").state is JobState.RUNNING
    assert str(after_.view.waiting_for("y")) == "waiting for x (running, 2 of 4 done)"
    finish(after_, "x[2]", 4)
    actions = finish(after_, "x[3]", 5)
    assert ends(actions)["x"] == (JobState.SUCCEEDED, "all 4 elements succeeded")
    assert bound(actions) == ["y"]
    assert after_.record("y").history[-2].cause == "dependencies met: x succeeded, w succeeded"


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[str, tuple[Dependency, ...], bool, bool]]:
    """Jobs with dependencies on earlier ones: (id, after, fails, keep)."""
    out = []
    for i in range(draw(st.integers(1, 12))):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        after = tuple(Dependency(f"j{d}", draw(st.sampled_from(list(Needs)))) for d in deps)
        out.append((f"j{i}", after, draw(st.booleans()), draw(st.booleans())))
    return out


@settings(max_examples=150, deadline=None)
@given(dags(), st.integers(1, 3))
def test_no_job_starts_before_its_dependencies_end_as_it_needs(
    jobs: list[tuple[str, tuple[Dependency, ...], bool, bool]], gpus: int
) -> None:
    sched = core(gpus=gpus)
    events = [
        JobSubmitted(job(i, gpus=1, after=a, on_unmet=OnUnmet.KEEP if k else OnUnmet.CANCEL))
        for i, a, _f, k in jobs
    ]
    ended: dict[str, JobState] = {}
    fails = {i: f for i, _a, f, _k in jobs}
    actions, now = sched.handle(events, 0), 0.0
    while True:
        for action in actions:
            if isinstance(action, Bind):
                record = sched.record(action.job_id)
                for dep in record.job.after:  # it starts only once each ended as it needs
                    assert dep.job in ended and dep.needs.met_by(ended[dep.job])
            if isinstance(action, JobTransition) and action.target in TERMINAL:
                ended[action.job_id] = action.target
        running = [r for r in sched.active_jobs() if r.state is JobState.RUNNING]
        if not running:
            break
        now += 1
        first = running[0]
        actions = sched.handle([TaskFinished(first.id, 0, first.run, not fails[first.id])], now)
    for i, after, _f, keep in jobs:
        unmet = [d for d in after if d.job in ended and not d.needs.met_by(ended[d.job])]
        if i not in ended:  # kept, with a dependency that can never be met, or behind one
            assert sched.record(i).state is JobState.PENDING
            assert (keep and unmet) or any(d.job not in ended for d in after)
        elif unmet:
            assert ended[i] is JobState.CANCELLED
        else:
            assert ended[i] is (JobState.FAILED if fails[i] else JobState.SUCCEEDED)


@settings(max_examples=100, deadline=None)
@given(
    ranges=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 30), st.integers(1, 4)), min_size=1, max_size=3
    ),
    cap=st.one_of(st.none(), st.integers(1, 5)),
    gpus=st.integers(1, 6),
    failing=st.sets(st.integers(0, 200), max_size=5),
    cancelled=st.sets(st.integers(0, 200), max_size=3),
)
def test_every_index_runs_once_within_the_cap(
    ranges: list[tuple[int, int, int]],
    cap: int | None,
    gpus: int,
    failing: set[int],
    cancelled: set[int],
) -> None:
    parts, low = [], 0
    for gap, length, step in ranges:
        parts.append(f"{low + gap}-{low + gap + length}:{step}")
        low += gap + length + 1
    spec = parse_array(",".join(parts) + (f"%{cap}" if cap else ""))
    sched = core(gpus=gpus)
    actions = sched.handle([JobSubmitted(job("x", gpus=1, array=spec))], 0)
    # cancel some elements before they run (created or not)
    gone = sorted(i for i in cancelled if i in spec)
    actions += sched.handle([JobCancelled(f"x[{i}]") for i in gone], 0.5)
    started: list[int] = []
    now = 1.0
    while True:
        started += [int(a.job_id[2:-1]) for a in actions if isinstance(a, Bind)]
        # a killed task's devices are free once it is reported stopped
        events: list[Event] = [
            TaskStopped(a.job_id, a.task, a.run) for a in actions if isinstance(a, Kill)
        ]
        running = [r for r in sched.active_jobs() if r.state is JobState.RUNNING and r.job.array_of]
        assert len(running) <= min(cap or gpus, gpus)
        if running:
            first = running[0]
            ok = first.job.array_index not in failing
            events.append(TaskFinished(first.id, 0, first.run, ok))
        if not events:
            break
        actions = sched.handle(events, now)
        now += 1
    ran = sorted(started)
    assert ran == sorted(set(ran))  # once each
    skipped = {i for i in gone if i not in ran}
    assert set(ran) | skipped == set(spec)
    bad = sorted({i for i in failing if i in set(ran)} | set(gone))
    record = sched.record("x")
    if not bad:
        assert record.state is JobState.SUCCEEDED
    else:
        assert record.state is (JobState.FAILED if ran else JobState.CANCELLED)
        assert record.history[-1].cause.startswith(f"{len(bad)} of {len(spec)} elements")
