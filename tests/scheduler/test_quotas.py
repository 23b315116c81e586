"""Hierarchical queues and quotas: guarantees, borrowing, lending limits, reclaim."""

from __future__ import annotations

from typing import Any

import pytest

from builders import gpu_node, job
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.cluster.usage import Ledger, Usage
from hetsched.framework.profile import ProfileError, parse_profile
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Bind, JobSubmitted, Preempt, Reject, Scheduler
from hetsched.scheduler.quota import QuotaTree


def _profile(**extra: Any) -> dict[str, Any]:
    team_a: dict[str, Any] = {"name": "team-a", "parent": "org", "nominal": {"gpu": 4}}
    team_b: dict[str, Any] = {"name": "team-b", "parent": "org", "nominal": {"gpu": 4}}
    team_a.update(extra.pop("a", {}))
    team_b.update(extra.pop("b", {}))
    return {"flavors": ["gpu", "gpu/A100"], "queues": [{"name": "org"}, team_a, team_b], **extra}


def _core(**extra: Any) -> Scheduler:
    nodes = [gpu_node("g0", gpus=4), gpu_node("g1", gpus=4)]
    return Scheduler(ClusterState(nodes), parse_profile(_profile(**extra)))


def _gpus(core: Scheduler, queue: str) -> int:
    return core.ledger.by_queue.get(queue, Usage()).get("gpu", 0) // 1000


@pytest.mark.parametrize(
    ("queue", "gpus", "problem"),
    [
        ("nope", 1, "unknown queue 'nope'"),
        ("org", 1, "not a leaf"),
        ("team-a", 9, "at most 6 gpu"),
    ],
)
def test_submissions_that_can_never_run_are_rejected(queue: str, gpus: int, problem: str) -> None:
    core = _core(a={"borrowing_limit": {"gpu": 2}})
    actions = core.handle([JobSubmitted(job("j", gpus=gpus, queue=queue))], 0)
    rejects = [a for a in actions if isinstance(a, Reject)]
    assert len(rejects) == 1 and problem in rejects[0].reason
    record = core.record("j")
    assert record.state is JobState.REJECTED
    assert record.explanation is not None and problem in str(record.explanation)


@pytest.mark.parametrize(
    ("a_limits", "a_jobs", "b_jobs", "a_running", "b_running"),
    [
        ({}, 8, 0, 8, 0),  # borrows all of B's idle guarantee
        ({"borrowing_limit": {"gpu": 2}}, 8, 0, 6, 0),  # at most nominal + 2
        ({}, 8, 4, 8, 0),  # no preemption enabled: B waits for A's borrowed GPUs
    ],
)
def test_borrowing_within_limits(
    a_limits: dict[str, Any], a_jobs: int, b_jobs: int, a_running: int, b_running: int
) -> None:
    core = _core(a=a_limits)
    core.handle([JobSubmitted(job(f"a{i}", gpus=1, queue="team-a")) for i in range(a_jobs)], 0)
    core.handle([JobSubmitted(job(f"b{i}", gpus=1, queue="team-b")) for i in range(b_jobs)], 1)
    assert (_gpus(core, "team-a"), _gpus(core, "team-b")) == (a_running, b_running)
    borrowing = [r.id for r in core.jobs.values() if r.borrowing]
    assert len(borrowing) == max(0, a_running - 4)
    for record in core.jobs.values():
        if record.state is JobState.PENDING:
            assert record.explanation is not None and record.explanation.summary


def test_lending_limit_keeps_part_of_the_guarantee_idle() -> None:
    core = _core(b={"lending_limit": {"gpu": 1}})
    core.handle([JobSubmitted(job(f"a{i}", gpus=1, queue="team-a")) for i in range(8)], 0)
    assert _gpus(core, "team-a") == 5  # 4 own + the 1 GPU B lends
    explanation = core.record("a7").explanation
    assert explanation is not None
    text = str(explanation)
    assert "quota: queue team-a gpu" in text and "uses 5 gpu" in text and "borrowed 1 gpu" in text


def test_model_flavor_quota_counts_the_device_model() -> None:
    nodes = [gpu_node("a100", gpus=4, model="A100"), gpu_node("h100", gpus=4, model="H100")]
    profile = parse_profile(
        {
            "flavors": ["gpu/A100"],
            "queues": [
                {"name": "q", "nominal": {"gpu/A100": 1}, "borrowing_limit": {"gpu/A100": 0}}
            ],
        }
    )
    core = Scheduler(ClusterState(nodes), profile)
    sel = 'device.attributes["model"] == "A100"'
    actions = core.handle(
        [JobSubmitted(job(f"j{i}", gpus=1, queue="q", selector=sel)) for i in range(3)], 0
    )
    assert [a.job_id for a in actions if isinstance(a, Bind)] == ["j0"]
    assert "gpu/A100" in str(core.record("j1").explanation)


def test_reclaim_gives_b_its_guarantee_and_keeps_a_at_its_own() -> None:
    profile = _profile(post_filter=[{"name": "preemption", "args": {"grace_s": 5}}])
    core = Scheduler(
        ClusterState([gpu_node("g0", gpus=4), gpu_node("g1", gpus=4)]), parse_profile(profile)
    )
    low_a: list[int] = []

    def watch(now: float) -> None:
        if now > 0:
            low_a.append(_gpus(core, "team-a"))

    h = Harness(core, duration=lambda j: 1000.0, after=watch)
    h.submit(job(f"a{i}", gpus=1, queue="team-a", submit_time=0.0) for i in range(8))
    h.submit(job(f"b{i}", gpus=1, queue="team-b", submit_time=10.0) for i in range(4))
    h.run(until=100.0)
    borrowed = {r.id for r in core.jobs.values() if r.id.startswith("a") and r.borrowing}
    preempts = [a for _, a in h.actions(Preempt)]
    assert all(isinstance(p, Preempt) and p.kind == "reclaim" for p in preempts)
    victims = {p.job_id for p in preempts if isinstance(p, Preempt)}
    # reclaimed at B's submission (t=10), only borrowing jobs, exactly as many as B needs
    assert [t for t, _ in h.actions(Preempt)] == [10.0] * 4
    assert len(victims) == 4 and victims <= {"a4", "a5", "a6", "a7"}
    assert not borrowed & {"a0", "a1", "a2", "a3"}
    b_starts = [t for t, a in h.actions(Bind) if a.job_id.startswith("b")]
    assert b_starts == [15.0] * 4  # after the 5 s grace
    assert _gpus(core, "team-b") == 4 and _gpus(core, "team-a") == 4
    assert min(low_a) >= 4  # A never below its guarantee
    for victim in victims:
        record = core.record(victim)
        assert record.state is JobState.PENDING and record.explanation is not None


@pytest.mark.parametrize(
    ("a_used", "b_used", "need_b", "blocked"),
    [
        (4, 0, 4, False),
        (8, 0, 1, True),  # A borrowed B's whole guarantee
        (6, 0, 2, False),  # B's idle 2 still cover A's 2 borrowed
        (6, 0, 3, True),
        (0, 0, 8, False),  # borrowing A's idle guarantee
    ],
)
def test_quota_rule_table(a_used: int, b_used: int, need_b: int, blocked: bool) -> None:
    profile = parse_profile(_profile())
    tree = QuotaTree(profile.queues)
    ledger = Ledger()
    state = ClusterState([gpu_node("g0", gpus=8)])
    ledger.by_queue["team-a"] = Usage({"gpu": a_used * 1000})
    ledger.by_queue["team-b"] = Usage({"gpu": b_used * 1000})
    block = tree.check("team-b", Usage({"gpu": need_b * 1000}), ledger, state)
    assert (block is not None) == blocked


@pytest.mark.parametrize(
    ("queues", "path"),
    [
        ([{"name": "a", "nominal": {"gpu": -1}}], "queues[0].nominal.gpu"),
        ([{"name": "a", "nominal": {"tpu": 1}}], "queues[0].nominal.tpu"),
        ([{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}], "queues[0].parent"),
        ([{"name": "a", "parent": "zz"}], "queues[0].parent"),
        (
            [{"name": "a", "nominal": {"gpu": 1}, "lending_limit": {"gpu": 2}}],
            "queues[0].lending_limit.gpu",
        ),
        ([{"name": "a"}, {"name": "a"}], "queues[1].name"),
        ([{"name": "a", "nominal": {"memory": "lots"}}], "queues[0].nominal.memory"),
    ],
)
def test_profile_queue_errors_have_field_paths(queues: list[dict[str, Any]], path: str) -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile({"flavors": ["gpu"], "queues": queues})
    assert path in str(err.value)


def _tree(team1_borrow: int | None = None) -> QuotaTree:
    team1: dict[str, Any] = {"name": "team1", "parent": "org", "nominal": {"gpu": 3}}
    if team1_borrow is not None:
        team1["borrowing_limit"] = {"gpu": team1_borrow}
    profile = parse_profile(
        {
            "flavors": ["gpu"],
            "queues": [
                {"name": "org", "nominal": {"gpu": 8}},  # 2 more than its children's 6
                team1,
                {"name": "u1", "parent": "team1", "nominal": {"gpu": 1}},
                {"name": "u2", "parent": "team1", "nominal": {"gpu": 2}},
                {"name": "team2", "parent": "org", "nominal": {"gpu": 3}},
            ],
        }
    )
    return QuotaTree(profile.queues)


@pytest.mark.parametrize(
    ("team1_borrow", "u1_wants", "blocked_at"),
    [
        (None, 3, None),  # u2 lends its 2
        (None, 4, None),  # + team2 lends 1
        (None, 9, None),  # + team2's 3, org's own 2, and 1 of the 2 no root claims
        (None, 10, None),
        (None, 11, "cluster"),  # 1 more than the 10-GPU cluster offers
        (1, 4, None),  # team1 borrows exactly 1
        (1, 5, "team1"),
    ],
)
def test_three_level_tree(team1_borrow: int | None, u1_wants: int, blocked_at: str | None) -> None:
    tree = _tree(team1_borrow)
    state = ClusterState([gpu_node("g0", gpus=10)])
    block = tree.check("u1", Usage({"gpu": u1_wants * 1000}), Ledger(), state)
    if blocked_at is None:
        assert block is None
    else:
        assert block is not None
        expected = "borrowing limit of team1" if blocked_at == "team1" else "guarantees"
        assert expected in block.limit


@pytest.mark.parametrize(
    ("a_jobs", "b_gpus", "victims"),
    [
        ([4, 2, 2], 4, ["a1", "a2"]),  # the two 2-GPU borrowers: A stays at 4
        ([2, 6], 4, []),  # taking the 6-GPU job would leave A at 2, below its 4
        ([2, 2, 2, 2], 2, ["a3"]),  # the newest borrower, one is enough
    ],
)
def test_reclaim_never_takes_the_lender_below_its_guarantee(
    a_jobs: list[int], b_gpus: int, victims: list[str]
) -> None:
    profile = _profile(post_filter=["preemption"])
    core = Scheduler(ClusterState([gpu_node("g0", gpus=8)]), parse_profile(profile))
    for i, gpus in enumerate(a_jobs):
        core.handle([JobSubmitted(job(f"a{i}", gpus=gpus, queue="team-a"))], float(i))
    actions = core.handle([JobSubmitted(job("b", gpus=b_gpus, queue="team-b"))], 100)
    assert sorted(a.job_id for a in actions if isinstance(a, Preempt)) == victims
    if not victims:
        assert "would not fit even if all" in str(core.record("b").explanation)
