"""Quotas and fair share with network topology: a gang that asks for a domain is admitted by
its queue's quota as a whole and holds no domain while it waits for quota, and the queue
order (fifo or DRF) decides which of two gangs gets the one rack that holds either; the
what-if a federation asks says when a rack frees up. Each against outcomes worked out by
hand."""

from __future__ import annotations

from typing import Any

import pytest

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.device import Node
from hetsched.model.topology import TopologyRequest
from hetsched.scheduler import Bind, JobSubmitted, Pending, Scheduler, TaskFinished

BLOCK, RACK = "net/block", "net/rack"
REQUIRED_RACK = TopologyRequest(required=RACK)


def _racks(**sizes: int) -> list[Node]:
    """One block; rack NAME holds sizes[NAME] nodes NAME0, NAME1, ... of 4 GPUs each."""
    return [
        gpu_node(f"{rack}{i}", gpus=4, labels={BLOCK: "b", RACK: rack})
        for rack, count in sizes.items()
        for i in range(count)
    ]


def _core(nodes: list[Node], profile: dict[str, Any]) -> Scheduler:
    state = ClusterState(nodes)
    state.set_topology((BLOCK, RACK))
    return Scheduler(state, parse_profile({"score": ["bestfit"], **profile}))


def _binds(actions: list[Any]) -> dict[str, list[str]]:
    """Each bound job's nodes, by task index."""
    return {
        a.job_id: [p.node for _, p in sorted(a.placements)] for a in actions if isinstance(a, Bind)
    }


def test_quota_admits_a_required_rack_gang_whole_and_it_holds_nothing_while_waiting() -> None:
    # r1 = r10, r11 and r2 = r20, r21; team-a may use 8 GPUs and borrow none
    queues = [
        {"name": "org"},
        {"name": "team-a", "parent": "org", "nominal": {"gpu": 8}, "borrowing_limit": {"gpu": 0}},
        {"name": "team-b", "parent": "org", "nominal": {"gpu": 8}},
    ]
    core = _core(_racks(r1=2, r2=2), {"flavors": ["gpu"], "queues": queues})
    first = job("a1", gpus=4, queue="team-a", topology=REQUIRED_RACK)
    # both racks hold 8: best fit takes the first, r1
    assert _binds(core.handle([JobSubmitted(first)], 0.0)) == {"a1": ["r10"]}
    gang = job("x", gpus=4, replicas=2, queue="team-a", topology=REQUIRED_RACK)
    actions = core.handle([JobSubmitted(gang)], 1.0)
    # r2 has room for both tasks, but team-a has 4 of its 8 GPUs left: x waits for quota
    assert _binds(actions) == {}
    (waiting,) = [a for a in actions if isinstance(a, Pending) and a.job_id == "x"]
    assert "quota: queue team-a gpu" in str(waiting.explanation)
    assert not [key for key in core.state.allocations if str(key).startswith("x/")]
    # a1 ends: team-a has 8 left and both racks are free again; best fit ties on r1
    assert _binds(core.handle([TaskFinished("a1", 0, 1)], 2.0)) == {"x": ["r10", "r11"]}


@pytest.mark.parametrize(
    ("sort", "winner", "loser"),
    [
        # fifo: alice-2 came first and takes the rack that holds a gang of 2
        ("fifo", "alice-2", "bob-1"),
        # drf: alice already holds 4 of the 12 GPUs and bob none, so bob goes first
        ("drf", "bob-1", "alice-2"),
    ],
)
def test_queue_order_decides_which_gang_gets_the_one_rack_that_holds_it(
    sort: str, winner: str, loser: str
) -> None:
    # r1 = r10, r11 and r2 = r20 (4 GPUs each)
    core = _core(_racks(r1=2, r2=1), {"queue_sort": sort})
    alone = job("alice-1", gpus=4, user="alice", topology=REQUIRED_RACK)
    # r1 holds 2 tasks of 4 GPUs, r2 1: best fit takes r2
    assert _binds(core.handle([JobSubmitted(alone)], 0.0)) == {"alice-1": ["r20"]}
    gangs = [
        job(name, gpus=4, replicas=2, user=name.split("-")[0], topology=REQUIRED_RACK)
        for name in ("alice-2", "bob-1")
    ]
    actions = core.handle([JobSubmitted(g) for g in gangs], 1.0)
    assert _binds(actions) == {winner: ["r10", "r11"]}
    (waiting,) = [a for a in actions if isinstance(a, Pending) and a.job_id == loser]
    assert waiting.explanation.summary == (
        "topology (required rack): no rack has room for any of its 2 tasks"
    )


@pytest.mark.parametrize(("topology", "start"), [(REQUIRED_RACK, 15.0), (None, 10.0)])
def test_what_if_says_when_a_rack_frees_up(topology: TopologyRequest | None, start: float) -> None:
    # r1 = r10, r11 and r2 = r20, r21 (4 GPUs each)
    core = _core(_racks(r1=2, r2=2), {})
    running = [
        ("j1", 10.0),  # r1 and r2 hold 2 tasks each: the first, r1 (r10)
        ("j2", 20.0),  # r1 holds 1, r2 2: best fit r1 (r11)
        ("j3", 15.0),  # only r2 holds one (r20)
    ]
    for name, runtime in running:
        running_job = job(name, gpus=4, estimated_runtime_s=runtime, topology=REQUIRED_RACK)
        core.handle([JobSubmitted(running_job)], 0.0)
    assert [core.view.job(n).placements[0].node for n, _ in running] == ["r10", "r11", "r20"]
    # 2 tasks of 4 GPUs: r21 alone is free now. In one rack: r2 at 15 (j3 ends), before
    # r1 at 20; anywhere: r10 and r21 at 10 (j1 ends)
    answer = core.view.what_if(job("x", gpus=4, replicas=2, topology=topology))
    assert (answer.fits_now, answer.start) == (False, start)
