"""Round-based allocation inside the core (the profile's ``rounds`` section): literal
scenarios through ``Scheduler.handle``, and the profile's validation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cpu_node, gpu_node, job
from hetsched.cluster.state import ClusterState
from hetsched.framework.profile import ProfileError, RoundsSpec, parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.job import Job
from hetsched.model.speed import JobSpeed
from hetsched.scheduler import (
    Action,
    Bind,
    Event,
    JobSubmitted,
    Migrate,
    Pending,
    Preempt,
    Scheduler,
    TaskFinished,
    TaskStopped,
    Tick,
)
from hetsched.scheduler.actions import MigrationKind, PreemptionKind

CONTINUOUS = Checkpointing(interval_s=0, notice_s=5)


def _job(job_id: str, at: float = 0.0, a100: float = 2.0, **kwargs: Any) -> Job:
    kwargs.setdefault("checkpoint", CONTINUOUS)
    speed = JobSpeed({"A100": a100, "V100": 1.0}, work=1e6)
    return job(job_id, gpus=1, submit_time=at, speed=speed, **kwargs)


def _core(**rounds: Any) -> Scheduler:
    nodes = [gpu_node("a", 1, "A100"), gpu_node("v", 1, "V100"), cpu_node("c")]
    profile = parse_profile({"rounds": {"policy": "las", "round_s": 360, **rounds}})
    return Scheduler(ClusterState(nodes), profile)


def _of(actions: list[Action], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def _bound(actions: list[Action]) -> dict[str, str]:
    return {a.job_id: a.placements[0][1].node for a in _of(actions, Bind)}


def test_a_round_starts_jobs_on_their_models_and_asks_for_the_next_boundary() -> None:
    core = _core()
    actions = core.handle([JobSubmitted(_job("j0")), JobSubmitted(_job("j1", a100=1.5))], 0.0)
    # las: j0 gains more from the A100 than j1 does
    assert _bound(actions) == {"j0": "a", "j1": "v"}
    assert core.next_wakeup() == 360.0


def test_an_arrival_waits_for_the_boundary_then_takes_the_place_of_a_job_that_ran() -> None:
    core = _core(solve_on_change=True)
    core.handle([JobSubmitted(_job("j0")), JobSubmitted(_job("j1", a100=1.5))], 0.0)
    waiting = core.handle([JobSubmitted(_job("j2"))], 10.0)
    assert not _of(waiting, Bind)
    (pending,) = _of(waiting, Pending)
    assert "waits for a round" in pending.explanation.summary
    assert core.next_wakeup() == 360.0
    boundary = core.handle([Tick()], 360.0)
    (stop,) = _of(boundary, Preempt)
    assert stop.kind is PreemptionKind.ROUND and stop.notice_s == 5 and stop.preemptor == ""
    assert not _of(boundary, Bind)  # its devices are held until the stop is acknowledged
    chosen = core.view.job("j2")
    assert chosen is not None and chosen.explanation is not None
    assert "chosen for" in chosen.explanation.summary
    after = core.handle([TaskStopped(stop.job_id, 0, stop.run)], 390.0)
    assert list(_bound(after)) == ["j2"]
    assert core.next_wakeup() == 720.0


def test_a_job_moves_to_the_faster_model_when_it_frees() -> None:
    core = _core(solve_on_change=True)
    core.handle([JobSubmitted(_job("fast")), JobSubmitted(_job("slow", a100=1.5))], 0.0)
    core.handle([TaskFinished("fast", 0, 1, True)], 100.0)
    boundary = core.handle([Tick()], 360.0)
    (move,) = _of(boundary, Migrate)
    assert move.job_id == "slow" and move.kind is MigrationKind.ROUND
    assert move.placements[0][1].node == "a"
    arrived = core.handle([TaskStopped("slow", 0, 1)], 390.0)
    assert _bound(arrived) == {"slow": "a"}


def test_jobs_that_cannot_checkpoint_keep_their_devices_until_they_end() -> None:
    core = _core(solve_on_change=True)
    first = [JobSubmitted(_job(f"j{i}", checkpoint=None)) for i in range(2)]
    where = _bound(core.handle(first, 0.0))
    core.handle([JobSubmitted(_job("late"))], 10.0)
    for t in (360.0, 720.0, 1080.0):
        actions = core.handle([Tick()], t)
        assert not _of(actions, Preempt) and not _of(actions, Migrate) and not _of(actions, Bind)
    done = core.handle([TaskFinished("j0", 0, 1, True)], 1100.0)
    assert not _of(done, Bind)  # the freed device waits for the next boundary
    assert _bound(core.handle([Tick()], 1440.0)) == {"late": where["j0"]}


def test_a_job_younger_than_the_minimum_runtime_is_not_stopped() -> None:
    core = _core(solve_on_change=True, min_runtime_s=500)
    core.handle([JobSubmitted(_job("j0")), JobSubmitted(_job("j1", a100=1.5))], 0.0)
    core.handle([JobSubmitted(_job("j2"))], 10.0)
    assert not _of(core.handle([Tick()], 360.0), Preempt)
    assert _of(core.handle([Tick()], 720.0), Preempt)


def test_cpu_only_jobs_are_placed_by_the_ordinary_cycle_between_boundaries() -> None:
    core = _core()
    core.handle([JobSubmitted(_job("j0"))], 0.0)
    actions = core.handle([JobSubmitted(job("etl", cpu=4000, submit_time=20.0))], 20.0)
    assert _bound(actions) == {"etl": "c"}


@pytest.mark.parametrize(("arrivals", "starts"), [("wait", False), ("idle", True)])
def test_arrivals_wait_for_the_boundary_or_use_idle_devices(arrivals: str, starts: bool) -> None:
    core = _core(arrivals=arrivals)
    core.handle([JobSubmitted(_job("j0"))], 0.0)
    actions = core.handle([JobSubmitted(_job("j1"))], 30.0)
    assert bool(_of(actions, Bind)) is starts


def test_without_jobs_no_boundary_is_asked_for_and_the_next_arrival_starts_a_round() -> None:
    core = _core()
    core.handle([JobSubmitted(_job("j0"))], 0.0)
    core.handle([TaskFinished("j0", 0, 1, True)], 50.0)
    core.handle([Tick()], 360.0)
    assert core.next_wakeup() is None
    assert _bound(core.handle([JobSubmitted(_job("j1", at=1000.0))], 1000.0)) == {"j1": "a"}
    assert core.next_wakeup() == 1360.0


def test_agnostic_and_other_policies_run() -> None:
    for policy in ("agnostic-las", "ftf", "max-throughput", "fifo", "agnostic-fifo"):
        core = _core(policy=policy)
        events: list[Event] = [JobSubmitted(_job(f"j{i}")) for i in range(3)]
        assert len(_of(core.handle(events, 0.0), Bind)) == 2


PROFILE_ERRORS = [
    ({"policy": "nope"}, "rounds.policy: unknown round policy 'nope' (known: las,"),
    ({"round_s": 0}, "rounds.round_s: Input should be greater than 0"),
    ({"round_s": float("inf")}, "rounds.round_s: Input should be a finite number"),
    ({"alpha": 1.5}, "rounds.alpha: Input should be less than or equal to 1"),
    ({"arrivals": "soon"}, "rounds.arrivals: Input should be 'wait' or 'idle'"),
    ({"min_runtime_s": -1}, "rounds.min_runtime_s: Input should be greater than or equal to 0"),
    ({"rounds_s": 10}, "rounds.rounds_s: Extra inputs are not permitted"),
    ({"device_class": ""}, "rounds.device_class: String should have at least 1 character"),
]


@pytest.mark.parametrize(("section", "message"), PROFILE_ERRORS)
def test_a_bad_rounds_section_names_the_field(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile({"rounds": section})
    assert message in str(caught.value)


def test_rounds_refuse_quotas_and_gang_holds() -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile(
            {
                "flavors": ["gpu"],
                "queues": [{"name": "a", "nominal": {"gpu": 1}}],
                "gang": {"hold": True},
                "rounds": {},
            }
        )
    text = str(caught.value)
    assert "queues[0]: quotas do not apply with 'rounds'" in text
    assert "gang.hold: must be false with 'rounds'" in text


def test_defaults() -> None:
    spec = parse_profile({"rounds": {}}).rounds
    assert spec == RoundsSpec()
    assert (spec.policy, spec.round_s, spec.arrivals, spec.min_runtime) == ("las", 360, "wait", 180)
    assert parse_profile({}).rounds is None


@pytest.mark.parametrize(
    ("gpus", "replicas", "nodes"),
    [
        # one task of 4: the A100s add up to 4 but no node holds 4; the V100 node does
        (4, 1, {"v"}),
        # two tasks of 2: each A100 node holds one, so the faster model is fine
        (2, 2, {"a1", "a2"}),
        # four tasks of 1: anywhere on the A100s
        (1, 4, {"a1", "a2"}),
        # two tasks of 3: no A100 node holds 3, the V100 node holds one only: no model can
        # hold the job at once; the ordinary cycle places what fits (nothing here)
        (3, 2, set()),
    ],
)
def test_a_round_gives_a_multi_device_job_only_a_model_whose_nodes_can_hold_it(
    gpus: int, replicas: int, nodes: set[str]
) -> None:
    cluster = [gpu_node("a1", 2, "A100"), gpu_node("a2", 2, "A100"), gpu_node("v", 4, "V100")]
    profile = parse_profile({"rounds": {"policy": "las", "round_s": 360}})
    core = Scheduler(ClusterState(cluster), profile)
    speed = JobSpeed({"A100": 2.0, "V100": 1.0}, work=1e6)
    big = job("big", gpus=gpus, replicas=replicas, speed=speed, checkpoint=CONTINUOUS)
    actions = core.handle([JobSubmitted(big)], 0.0)
    placed = {p.node for bind in _of(actions, Bind) for _, p in bind.placements}
    # started at once, in the first round, not a round later
    assert placed == nodes


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(
        st.tuples(st.sampled_from(["A100", "V100"]), st.integers(1, 4)), min_size=1, max_size=4
    ),
    gpus=st.integers(1, 4),
    replicas=st.integers(1, 3),
)
def test_a_round_job_starts_in_the_first_round_when_some_model_can_hold_it(
    sizes: list[tuple[str, int]], gpus: int, replicas: int
) -> None:
    cluster = [gpu_node(f"n{i}", count, model) for i, (model, count) in enumerate(sizes)]
    core = Scheduler(
        ClusterState(cluster), parse_profile({"rounds": {"policy": "las", "round_s": 360}})
    )
    speed = JobSpeed({"A100": 2.0, "V100": 1.0}, work=1e6)
    big = job("big", gpus=gpus, replicas=replicas, speed=speed, checkpoint=CONTINUOUS)
    actions = core.handle([JobSubmitted(big)], 0.0)
    held = {
        model: sum(count // gpus for m, count in sizes if m == model) >= replicas
        for model in ("A100", "V100")
    }
    model_of = {f"n{i}": model for i, (model, _) in enumerate(sizes)}
    models = {model_of[p.node] for bind in _of(actions, Bind) for _, p in bind.placements}
    if any(held.values()):
        # all its tasks at once, on one model that can hold them, in the first round
        assert sum(len(b.placements) for b in _of(actions, Bind)) == replicas
        (model,) = models
        assert held[model]


def test_a_job_its_driver_cannot_move_keeps_its_devices_across_rounds() -> None:
    core = _core(solve_on_change=True)
    pinned = [_job("j0", movable=False), _job("j1", a100=1.5, movable=False)]
    core.handle([JobSubmitted(j) for j in pinned], 0.0)
    core.handle([JobSubmitted(_job("j2"))], 10.0)
    boundary = core.handle([Tick()], 360.0)
    # without movable=False one of them yields to j2 here (the test above)
    assert not _of(boundary, Preempt) and not _of(boundary, Migrate)
    assert {r.id for r in core.holding_jobs()} == {"j0", "j1"}
