"""The interpreter's lost-work accounting (``lost_work=True``): a table of cases and a
hypothesis property over random runs, checkpoints, stops and exits of one job."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.drivers import Exit, Interpreter, Observer, Start, Stop
from hetsched.keys import TaskKey
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Action,
    Bind,
    Change,
    JobTransition,
    Migrate,
    MigrationKind,
    Preempt,
)

P0 = Placement("n", 1000, 1024, (DeviceShare("n/gpu0", 1000),))
P1 = Placement("n", 1000, 1024, (DeviceShare("n/gpu1", 1000),))


class Told(Observer):
    """An executor that does nothing and an observer that keeps the lost work told."""

    def __init__(self) -> None:
        self.lost: list[tuple[str, int, float]] = []

    def start(self, tasks: Sequence[Start], now: float) -> None:
        pass

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        pass

    def lost_work(self, job_id: str, run: int, lost_s: float) -> None:
        self.lost.append((job_id, run, lost_s))


def _bind(run: int, now: float) -> list[Action]:
    moved = JobTransition(
        "j", now, JobState.PENDING, JobState.RUNNING, Change.STARTED, "", run, 0, 0.0
    )
    return [moved, Bind("j", run, ((0, P0), (1, P1)))]


def _stop(run: int, now: float, change: Change = Change.PREEMPTED) -> list[Action]:
    moved = JobTransition("j", now, JobState.RUNNING, JobState.PENDING, change, "", run, 0, 0.0)
    return [moved, Preempt("j", run, (0, 1), 5.0, "room", "hi", notice_s=10.0)]


@pytest.mark.parametrize(
    ("checkpoint_at", "stop_at", "lost"),
    [
        (None, 30.0, 30.0),  # never saved: all of its run
        (20.0, 30.0, 10.0),  # since its checkpoint
        (31.0, 30.0, 0.0),  # saved inside its notice: nothing
    ],
)
def test_a_stopped_run_loses_the_time_since_its_last_checkpoint(
    checkpoint_at: float | None, stop_at: float, lost: float
) -> None:
    told = Told()
    interpreter = Interpreter(told, told, lost_work=True)
    interpreter.carry_out(_bind(1, 0.0), 0.0)
    if checkpoint_at is not None and checkpoint_at < stop_at:
        interpreter.checkpointed(TaskKey("j", 0, 1), checkpoint_at)
    interpreter.carry_out(_stop(1, stop_at), stop_at)
    if checkpoint_at is not None and checkpoint_at >= stop_at:
        interpreter.checkpointed(TaskKey("j", 1, 1), checkpoint_at)
    interpreter.report(Exit(TaskKey("j", 0, 1)))
    assert told.lost == []  # told once the run's last task has ended
    interpreter.report(Exit(TaskKey("j", 1, 1)))
    assert told.lost == [("j", 1, lost)]


def test_a_run_that_finishes_loses_nothing() -> None:
    told = Told()
    interpreter = Interpreter(told, told, lost_work=True)
    interpreter.carry_out(_bind(1, 0.0), 0.0)
    interpreter.report(Exit(TaskKey("j", 0, 1)))
    interpreter.report(Exit(TaskKey("j", 1, 1)))
    assert told.lost == []


OPS = st.lists(
    st.tuples(st.sampled_from(["bind", "checkpoint", "stop", "exit"]), st.integers(0, 1)),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, gaps=st.lists(st.floats(0.0, 10.0), min_size=40, max_size=40))
def test_lost_work_is_told_once_per_stopped_run_and_only_since_its_last_checkpoint(
    ops: list[tuple[str, int]], gaps: list[float]
) -> None:
    """Against a model: each run stopped to run again is told exactly once (no work counted
    twice), after its last task ended, with the time from its last checkpoint before the
    stop (or its start) to the stop, and 0 if it saved after the stop."""
    told = Told()
    interpreter = Interpreter(told, told, lost_work=True)
    now, run = 0.0, 0
    live: set[int] = set()
    started = stopped = 0.0
    saved: float | None = None
    is_stopped = False
    expected: list[tuple[str, int, float]] = []
    for (op, task), gap in zip(ops, gaps, strict=False):
        now += gap
        if op == "bind" and not live:
            run += 1
            interpreter.carry_out(_bind(run, now), now)
            live, started, saved, is_stopped = {0, 1}, now, None, False
        elif op == "checkpoint" and task in live:
            assert interpreter.checkpointed(TaskKey("j", task, run), now) is not None
            saved = now
        elif op == "stop" and live and not is_stopped:
            interpreter.carry_out(_stop(run, now), now)
            is_stopped, stopped = True, now
        elif op == "exit" and task in live:
            interpreter.report(Exit(TaskKey("j", task, run)))
            live.discard(task)
            if not live and is_stopped:
                if saved is not None and saved >= stopped:
                    expected.append(("j", run, 0.0))
                else:
                    expected.append(("j", run, stopped - max(started, saved or started)))
    assert [(j, r) for j, r, _ in told.lost] == [(j, r) for j, r, _ in expected]
    assert [lost for *_, lost in told.lost] == pytest.approx([lost for *_, lost in expected])
    # a run's loss never exceeds the time it ran
    assert all(lost >= 0 for *_, lost in told.lost)


def test_a_run_resized_through_a_restart_loses_the_time_since_its_last_checkpoint() -> None:
    # an elastic job shrunk at 30 s (checkpoint at 20 s): its run 1 lost 10 s, as a
    # preempted run would; the kept rank goes on in run 2
    told = Told()
    interpreter = Interpreter(told, told, lost_work=True)
    interpreter.carry_out(_bind(1, 0.0), 0.0)
    interpreter.checkpointed(TaskKey("j", 0, 1), 20.0)
    moved = JobTransition(
        "j", 30.0, JobState.RUNNING, JobState.RUNNING, Change.RESIZING, "", 1, 0, 0.0
    )
    shrink = Migrate("j", 1, (0, 1), ((0, P0),), 10.0, 5.0, "room", MigrationKind.RESIZE, "hi")
    interpreter.carry_out([moved, shrink], 30.0)
    interpreter.report(Exit(TaskKey("j", 0, 1)))
    interpreter.report(Exit(TaskKey("j", 1, 1)))
    assert told.lost == [("j", 1, 10.0)]
