"""What a turn records of a move: where the job goes is reserved from the Migrate on, the
arrival takes the reservation up, and a move given up (the job cancelled, its destination
lost) gives it back. Through the planner and the real core, no processes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.controlplane.planner import TurnPlan, TurnPlanner
from hetsched.drivers import Exit
from hetsched.framework.profile import parse_profile
from hetsched.keys import TaskKey
from hetsched.model.checkpoint import Checkpointing
from hetsched.scheduler import Event, JobCancelled, JobSubmitted, NodeRemoved, Scheduler

SAVES = Checkpointing(interval_s=600, notice_s=20)
ON_B = 'device.attributes["model"] == "B"'


def _moving() -> tuple[TurnPlanner, TurnPlan]:
    """a runs on n1, b (pinned to model B) on n2; c needs two GPUs: a moves to n2."""
    nodes = [gpu_node("n1", gpus=2, model="A"), gpu_node("n2", gpus=2, model="B")]
    profile = parse_profile(
        {"migration": {"min_runtime_s": 0, "defrag": {"enabled": True, "min_interval_s": 0}}}
    )
    planner = TurnPlanner(Scheduler(ClusterState(nodes), profile), kill_grace_s=1.0)
    planner.plan([JobSubmitted(job("a", gpus=1, checkpoint=SAVES))], [], 0.0)
    planner.plan([JobSubmitted(job("b", gpus=1, checkpoint=SAVES, selector=ON_B))], [], 0.0)
    plan = planner.plan([JobSubmitted(job("c", gpus=2))], [], 100.0)
    return planner, plan


def _stopped(run: int = 1) -> Exit:
    return Exit.of("a", 0, run, None, True, "stopped")


def test_a_move_reserves_its_destination_and_the_arrival_takes_it_up() -> None:
    planner, plan = _moving()
    assert plan.migrated == ["a"]
    ((key, placement),) = plan.reserved
    assert key == TaskKey("a", 0, 2) and placement.node == "n2"
    assert [s.key for s in plan.stops] == [TaskKey("a", 0, 1)]
    assert not plan.starts and not plan.arrived
    arrived = planner.plan([], [_stopped()], 110.0)
    moved = [s for s in arrived.starts if s.key.job == "a"]
    assert [s.key for s in moved] == [key] and arrived.arrived == {key}
    assert moved[0].placement == placement
    # c, for which a moved, starts as a new task: not an arrival
    assert [s.key for s in arrived.starts if s.key.job == "c"] == [TaskKey("c", 0, 1)]
    assert not arrived.unreserved


@pytest.mark.parametrize(
    "events",
    [
        [JobCancelled("a", "cancelled")],
        [NodeRemoved("n2", "node deleted")],
    ],
)
def test_a_move_given_up_gives_its_reservation_back(events: list[Event]) -> None:
    planner, _plan = _moving()
    given_up = planner.plan(events, [], 105.0)
    assert given_up.unreserved == [TaskKey("a", 0, 2)]
    later = planner.plan([], [_stopped()], 110.0)
    assert TaskKey("a", 0, 2) not in later.arrived


_STEP = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(["mover", "pinned", "wide"])),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("exit"), st.integers(0, 30)),
)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=40))
def test_what_the_turns_record_holds_what_the_core_holds_after_every_turn(
    steps: list[tuple[str, Any]],
) -> None:
    """The allocations a store would hold from the turns' records alone (starts that are
    not arrivals, reservations, minus exits and reservations given up) are the core's
    after every turn, with moves, arrivals, cancels and ends in any order."""
    nodes = [gpu_node("n1", gpus=2, model="A"), gpu_node("n2", gpus=2, model="B")]
    profile = parse_profile(
        {"migration": {"min_runtime_s": 0, "defrag": {"enabled": True, "min_interval_s": 0}}}
    )
    planner = TurnPlanner(Scheduler(ClusterState(nodes), profile), kill_grace_s=1.0)
    shapes = {
        "mover": {"gpus": 1, "checkpoint": SAVES},
        "pinned": {"gpus": 1, "checkpoint": SAVES, "selector": ON_B},
        "wide": {"gpus": 2},
    }
    held: set[TaskKey] = set()
    jobs: list[str] = []
    now = 0.0
    moves = 0
    # a move is under way from the third turn on (the scenario above); then anything
    opening = [("submit", "mover"), ("submit", "pinned"), ("submit", "wide")]
    for kind, arg in [*opening, *steps]:
        now += 10.0
        events: list[Event] = []
        exits: list[Exit] = []
        if kind == "submit":
            jobs.append(f"j{len(jobs)}")
            events.append(JobSubmitted(job(jobs[-1], **shapes[arg])))
        elif kind == "cancel" and jobs:
            events.append(JobCancelled(jobs[arg % len(jobs)], "cancelled"))
        elif kind == "exit" and (live := sorted(planner.live())):
            key = live[arg % len(live)]
            stopping = key not in planner.running()
            exits.append(Exit.of(key.job, key.task, key.run, 0, stopping, "ended"))
        plan = planner.plan(events, exits, now)
        moves += len(plan.migrated)
        held -= {TaskKey(e.job_id, e.task, e.run) for e in exits}
        held |= {key for key, _ in plan.reserved}
        held |= {s.key for s in plan.starts if s.key not in plan.arrived}
        assert plan.arrived <= {key for key, _ in plan.reserved} | held
        held -= set(plan.unreserved)
        core = {k for k, _ in planner.core.cluster.allocated_devices() if isinstance(k, TaskKey)}
        assert held == core
    assert moves >= 1
