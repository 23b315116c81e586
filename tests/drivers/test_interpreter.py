"""The interpreter's rules, case by case, with a recording executor."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.drivers import Exit, Interpreter, Observer, Start, Stop
from hetsched.framework.status import Code
from hetsched.keys import TaskKey
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Action,
    Bind,
    Change,
    JobTransition,
    Kill,
    Migrate,
    MigrationKind,
    Pending,
    Preempt,
    PreemptionKind,
    Reject,
    TaskCheckpointed,
    TaskFinished,
    TaskStopped,
)
from hetsched.scheduler.explain import Explanation

P0 = Placement("n", 1000, 1024, (DeviceShare("n/gpu0", 1000),))
P1 = Placement("n", 1000, 1024, (DeviceShare("n/gpu1", 1000),))


class Recorder(Observer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def start(self, tasks: Sequence[Start], now: float) -> None:
        self.calls.append(("start", tuple(str(t.key) for t in tasks)))

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        self.calls.append(
            ("stop", tuple((str(t.key), t.notice_s, t.grace_s, t.released) for t in tasks))
        )

    def transitioned(self, change: JobTransition) -> None:
        self.calls.append(("transitioned", change.change))

    def pending(self, action: Pending) -> None:
        self.calls.append(("pending", action.job_id))

    def rejected(self, action: Reject) -> None:
        self.calls.append(("rejected", action.job_id))

    def preempted(self, action: Preempt) -> None:
        self.calls.append(("preempted", action.job_id))

    def migrating(self, action: Migrate) -> None:
        self.calls.append(("migrating", action.job_id))


def started(job: str = "j") -> JobTransition:
    return JobTransition(
        job, 0.0, JobState.PENDING, JobState.RUNNING, Change.STARTED, "run 1", 1, 0, 0.0
    )


BIND = Bind("j", 1, ((0, P0), (1, P1)))
MOVE = MigrationKind.DEFRAG
WAIT = Pending("w", Explanation(Code.UNSCHEDULABLE, "no room"))


@pytest.mark.parametrize(
    ("actions", "calls"),
    [
        # a Bind starts its tasks in one call; job-level actions go to the observer in order
        (
            [started(), BIND, WAIT, Reject("r", "no")],
            [
                ("transitioned", Change.STARTED),
                ("start", ("j/0#1", "j/1#1")),
                ("pending", "w"),
                ("rejected", "r"),
            ],
        ),
        # a Kill stops one running task at once, with the driver's kill grace
        (
            [BIND, Kill("j", 1, 1, "failed")],
            [("start", ("j/0#1", "j/1#1")), ("stop", (("j/1#1", 0.0, 7.0, False),))],
        ),
        # a released Kill says so (the node or device is gone)
        (
            [BIND, Kill("j", 0, 1, "node gone", released=True)],
            [("start", ("j/0#1", "j/1#1")), ("stop", (("j/0#1", 0.0, 7.0, True),))],
        ),
        # a Kill of a task that does not run (another run, never started) stops nothing
        ([BIND, Kill("j", 0, 2, "stale")], [("start", ("j/0#1", "j/1#1"))]),
        # a Preempt stops exactly the tasks it names, with its notice and grace
        (
            [BIND, Preempt("j", 1, (1,), 30.0, "make room", "hi", PreemptionKind.PRIORITY, 5.0)],
            [
                ("start", ("j/0#1", "j/1#1")),
                ("preempted", "j"),
                ("stop", (("j/1#1", 5.0, 30.0, False),)),
            ],
        ),
        # a Migrate stops the tasks it names with its notice and grace; the next run's Bind
        # comes later from the core
        (
            [BIND, Migrate("j", 1, (0, 1), ((0, P1), (1, P0)), 10.0, 3.0, "move", MOVE, "w")],
            [
                ("start", ("j/0#1", "j/1#1")),
                ("migrating", "j"),
                ("stop", (("j/0#1", 10.0, 3.0, False), ("j/1#1", 10.0, 3.0, False))),
            ],
        ),
    ],
)
def test_actions_become_executor_and_observer_calls(
    actions: list[Action], calls: list[tuple[str, object]]
) -> None:
    recorder = Recorder()
    Interpreter(recorder, recorder, kill_grace_s=7.0).carry_out(actions, 0.0)
    assert recorder.calls == calls


@pytest.mark.parametrize(
    ("stop_first", "exit_", "event"),
    [
        # a running task's exit is a finish with its status
        (
            False,
            Exit(TaskKey("j", 0, 1), False, "exit 3"),
            TaskFinished("j", 0, 1, False, "exit 3"),
        ),
        (False, Exit(TaskKey("j", 0, 1)), TaskFinished("j", 0, 1, True, "")),
        # a stopping task's exit is a stop, however it ended
        (True, Exit(TaskKey("j", 0, 1), True, "done anyway"), TaskStopped("j", 0, 1)),
        # a report about another run, or a task never started, is stale
        (False, Exit(TaskKey("j", 0, 2)), None),
        (False, Exit(TaskKey("other", 0, 1)), None),
    ],
)
def test_reports_become_the_events_the_core_expects(
    stop_first: bool, exit_: Exit, event: object
) -> None:
    recorder = Recorder()
    interpreter = Interpreter(recorder, recorder)
    interpreter.carry_out([BIND], 0.0)
    if stop_first:
        interpreter.carry_out([Kill("j", 0, 1, "cancelled")], 1.0)
    assert interpreter.report(exit_) == event


def test_a_task_is_reported_once() -> None:
    recorder = Recorder()
    interpreter = Interpreter(recorder, recorder)
    interpreter.carry_out([BIND], 0.0)
    assert interpreter.report(Exit(TaskKey("j", 0, 1))) is not None
    assert interpreter.report(Exit(TaskKey("j", 0, 1))) is None
    # stopped after it ended: nothing to stop, and its report is not repeated
    interpreter.carry_out([Kill("j", 0, 1, "late")], 2.0)
    assert recorder.calls == [("start", ("j/0#1", "j/1#1"))]


def test_adopted_tasks_report_like_started_ones() -> None:
    recorder = Recorder()
    interpreter = Interpreter(recorder, recorder)
    interpreter.adopt(TaskKey("j", 0, 4), P0)
    assert interpreter.report(Exit(TaskKey("j", 0, 4))) == TaskFinished("j", 0, 4, True, "")


class Starts(Recorder):
    """Records what each start resumes from, and every stop's notice."""

    def __init__(self) -> None:
        super().__init__()
        self.resumes: list[object] = []
        self.notices: list[tuple[str, float, float]] = []

    def start(self, tasks: Sequence[Start], now: float) -> None:
        self.resumes += [t.resume for t in tasks]

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        self.notices += [(str(t.key), t.notice_s, now) for t in tasks]


def test_a_bind_hands_its_checkpoint_to_every_task() -> None:
    from hetsched.model.checkpoint import SavedCheckpoint

    saved = SavedCheckpoint(5.0, 1, step=40, path="/ckpt/40")
    recorder = Starts()
    Interpreter(recorder, recorder).carry_out([Bind("j", 2, ((0, P0), (1, P1)), saved)], 9.0)
    assert recorder.resumes == [saved, saved]


def test_a_checkpoint_inside_the_notice_ends_it_for_the_whole_run() -> None:
    recorder = Starts()
    interpreter = Interpreter(recorder, recorder)
    preempt = Preempt("j", 1, (0, 1), 4.0, "room", "hi", PreemptionKind.PRIORITY, 30.0)
    interpreter.carry_out([BIND, preempt], 0.0)
    assert recorder.notices == [("j/0#1", 30.0, 0.0), ("j/1#1", 30.0, 0.0)]
    event = interpreter.checkpointed(TaskKey("j", 0, 1), 6.0, step=12, path="/c")
    assert event == TaskCheckpointed("j", 0, 1, 12, "/c", None, None)
    # both tasks get a second stop with no notice: SIGTERM now, SIGKILL after the grace
    assert recorder.notices[2:] == [("j/0#1", 0.0, 6.0), ("j/1#1", 0.0, 6.0)]
    # a second checkpoint still counts, but the notice is over already
    assert interpreter.checkpointed(TaskKey("j", 1, 1), 7.0) is not None
    assert len(recorder.notices) == 4
    assert interpreter.report(Exit(TaskKey("j", 0, 1))) == TaskStopped("j", 0, 1)


def test_a_checkpoint_of_a_running_task_stops_nothing() -> None:
    recorder = Starts()
    interpreter = Interpreter(recorder, recorder)
    interpreter.carry_out([BIND], 0.0)
    event = interpreter.checkpointed(TaskKey("j", 1, 1), 3.0, progress=2.5, at=2.0)
    assert event == TaskCheckpointed("j", 1, 1, None, "", 2.5, 2.0)
    assert recorder.notices == []


@pytest.mark.parametrize("key", [TaskKey("j", 0, 2), TaskKey("other", 0, 1), TaskKey("j", 5, 1)])
def test_a_checkpoint_of_a_task_that_does_not_run_is_stale(key: TaskKey) -> None:
    recorder = Starts()
    interpreter = Interpreter(recorder, recorder)
    interpreter.carry_out([BIND], 0.0)
    assert interpreter.checkpointed(key, 1.0) is None


def test_a_checkpoint_after_the_exit_is_stale() -> None:
    recorder = Starts()
    interpreter = Interpreter(recorder, recorder)
    interpreter.carry_out([BIND, Kill("j", 0, 1, "x")], 0.0)
    interpreter.report(Exit(TaskKey("j", 0, 1)))
    assert interpreter.checkpointed(TaskKey("j", 0, 1), 1.0) is None
