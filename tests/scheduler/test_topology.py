"""Topology-aware placement in the core: required and preferred levels, slices, mixed-depth
trees, rank contiguity, best-fit domain choice and explanations, each against outcomes
worked out by hand on small labelled clusters."""

from __future__ import annotations

from typing import Any

import pytest

from builders import gpu_node, job
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.device import Node
from hetsched.model.topology import TopologyRequest
from hetsched.scheduler import (
    Bind,
    JobSubmitted,
    Migrate,
    Pending,
    Preempt,
    Scheduler,
    TaskFinished,
)

BLOCK, RACK, NVL = "net/block", "net/rack", "net/nvlink-domain"


def _node(name: str, block: str | None, rack: str | None, nvl: str | None = None) -> Node:
    labels = {k: v for k, v in ((BLOCK, block), (RACK, rack), (NVL, nvl)) if v is not None}
    return gpu_node(name, gpus=4, labels=labels)


def two_blocks() -> list[Node]:
    """b1: r1 = a0, a1 and r2 = a2, a3; b2: r3 = c0..c3 (4 GPUs per node)."""
    nodes = [_node(f"a{i}", "b1", "r1" if i < 2 else "r2") for i in range(4)]
    return nodes + [_node(f"c{i}", "b2", "r3") for i in range(4)]


def mixed() -> list[Node]:
    """b3: GB200-like rack r5 (nvlink domains nv1 = g0, g1 and nv2 = g2, g3) beside H100
    rack r6 (h0, h1, no nvlink label: each node its own nvlink domain)."""
    gb = [_node(f"g{i}", "b3", "r5", "nv1" if i < 2 else "nv2") for i in range(4)]
    return gb + [_node(f"h{i}", "b3", "r6") for i in range(2)]


def core(
    nodes: list[Node], levels: tuple[str, ...] = (BLOCK, RACK), score: str = "bestfit"
) -> Scheduler:
    state = ClusterState(nodes)
    state.set_topology(levels)
    return Scheduler(state, parse_profile({"score": [score]}))


def submit(sched: Scheduler, *jobs: Any, now: float = 0.0) -> list[Any]:
    return sched.handle([JobSubmitted(j) for j in jobs], now)


def nodes_of(actions: list[Any], job_id: str) -> list[str]:
    """The node of each task of the job's Bind, by task index."""
    (bind,) = [a for a in actions if isinstance(a, Bind) and a.job_id == job_id]
    return [p.node for _, p in sorted(bind.placements)]


def pending(actions: list[Any], job_id: str) -> list[str]:
    """The summary and job-level reasons of the job's Pending."""
    (found,) = [a for a in actions if isinstance(a, Pending) and a.job_id == job_id]
    return [found.explanation.summary, *found.explanation.reasons]


def topo(**kwargs: Any) -> TopologyRequest:
    return TopologyRequest(**kwargs)


@pytest.mark.parametrize(
    ("score", "inside"),
    [
        # best fit inside the rack: the fuller node first
        ("bestfit", (["a0"], ["a0", "a1", "a1"], ["a2", "a2", "a3", "a3"])),
        # dot product (not row-local: the domain's rows filtered afresh) prefers the emptier
        # a1; task 1 follows task 0 there while it fits
        ("dotprod", (["a0"], ["a1", "a1", "a0"], ["a2", "a2", "a3", "a3"])),
    ],
)
def test_required_rack_takes_the_best_fitting_rack(
    score: str, inside: tuple[list[str], ...]
) -> None:
    sched = core(two_blocks(), score=score)
    # racks hold r1 4, r2 4, r3 8 tasks of 2 GPUs: the smallest that holds it, r1
    actions = submit(sched, job("bg", gpus=2, topology=topo(required=RACK)))
    assert nodes_of(actions, "bg") == inside[0]
    # r1 now holds 3 (a0 1, a1 2), r2 4, r3 8: a job of 3 tasks fits r1 best
    actions = submit(sched, job("x", gpus=2, replicas=3, topology=topo(required=RACK)), now=1)
    assert nodes_of(actions, "x") == inside[1]
    # r1 is full; r2 (4) is the smallest that holds 4
    actions = submit(sched, job("y", gpus=2, replicas=4, topology=topo(required=RACK)), now=2)
    assert nodes_of(actions, "y") == inside[2]


def _r3_mostly_full(sched: Scheduler) -> None:
    """3 tasks of 4 GPUs that only r3 holds: c0..c2 full, r3 keeps c3's 4 GPUs."""
    actions = submit(sched, job("bg", gpus=4, replicas=3, topology=topo(required=RACK)))
    assert nodes_of(actions, "bg") == ["c0", "c1", "c2"]


def test_required_rack_waits_and_says_what_would_fit() -> None:
    sched = core(two_blocks())
    _r3_mostly_full(sched)
    # racks hold r1 4, r2 4, r3 2 tasks of 2 GPUs; block b1 8
    actions = submit(sched, job("x", gpus=2, replicas=6, topology=topo(required=RACK)), now=1)
    assert not [a for a in actions if isinstance(a, Bind)]
    assert pending(actions, "x")[:2] == [
        "topology (required rack): no rack has room for 6 tasks (most: rack r1 with 4)",
        "block b1 has room for 8 across 2 racks: `preferred` would place it now",
    ]


def test_preferred_rack_spans_the_fewest_racks_of_one_block() -> None:
    sched = core(two_blocks())
    _r3_mostly_full(sched)
    actions = submit(sched, job("x", gpus=2, replicas=6, topology=topo(preferred=RACK)), now=1)
    # no rack holds 6; block b1 holds 8: r1 first (4 tasks, in rank order), then r2
    assert nodes_of(actions, "x") == ["a0", "a0", "a1", "a1", "a2", "a2"]


def test_preferred_rack_inside_one_rack_when_one_fits() -> None:
    sched = core(two_blocks())
    actions = submit(sched, job("x", gpus=1, replicas=6, topology=topo(preferred=RACK)))
    # r1 and r2 hold 8 each, r3 16: best fit r1, filled node by node
    assert nodes_of(actions, "x") == ["a0"] * 4 + ["a1"] * 2


def test_rank_contiguity_fills_one_rack_before_the_next() -> None:
    sched = core(two_blocks())
    actions = submit(sched, job("bg", gpus=2, topology=topo(required=RACK)))
    assert nodes_of(actions, "bg") == ["a0"]
    actions = submit(sched, job("x", gpus=1, replicas=12, topology=topo(required=BLOCK)), now=1)
    # b1 holds 14, b2 16: best fit b1. No rack of b1 holds 12: the largest first (r2, 8),
    # then r1 (6), where best fit starts on the fuller a0. Consecutive tasks share a node,
    # then a rack (best fit alone would have put the first ones on a0)
    assert nodes_of(actions, "x") == ["a2"] * 4 + ["a3"] * 4 + ["a0"] * 2 + ["a1"] * 2


def test_slices_each_inside_one_nvlink_domain() -> None:
    sched = core(mixed(), (BLOCK, RACK, NVL))
    request = topo(required=RACK, slice_size=2, slice_required=NVL)
    actions = submit(sched, job("x", gpus=4, replicas=4, topology=request))
    # r5's nvlink domains hold one slice of 2 tasks of 4 GPUs each; r6's lone nodes none
    assert nodes_of(actions, "x") == ["g0", "g1", "g2", "g3"]


def test_slices_wait_when_no_domain_holds_a_whole_slice() -> None:
    sched = core(mixed(), (BLOCK, RACK, NVL))
    # 5 tasks of 1 GPU in one nvlink domain: nv1 (8) best fits: g0 full, g1 3 free
    actions = submit(sched, job("bg", gpus=1, replicas=5, topology=topo(required=NVL)))
    assert nodes_of(actions, "bg") == ["g0"] * 4 + ["g1"]
    request = topo(required=RACK, slice_size=2, slice_required=NVL)
    actions = submit(sched, job("x", gpus=4, replicas=4, topology=request), now=1)
    # only nv2 still holds a slice (8 GPUs): r5 holds 2 tasks in slices, r6 none
    assert pending(actions, "x")[:2] == [
        "topology (required rack, slices of 2 per nvlink-domain): no rack has room for "
        "4 tasks in slices of 2, each inside one nvlink-domain (most: rack r5 with 2)",
    ]


def test_mixed_depth_nodes_without_a_label_are_domains_by_themselves() -> None:
    state = ClusterState([*mixed(), _node("x", "b3", None)])
    state.set_topology((BLOCK, RACK, NVL))
    net = state.network()
    assert net is not None
    assert net.names == [["b3"], ["r5", "r6", "x"], ["nv1", "nv2", "h0", "h1", "x"]]
    assert net.parent[2].tolist() == [0, 0, 1, 1, 2]
    assert net.of[2].tolist() == [0, 0, 1, 1, 2, 3, 4]
    sched = Scheduler(state, parse_profile({"score": ["bestfit"]}))
    # 2 tasks of 4 GPUs in one nvlink domain: nv1 and nv2 hold 2, lone nodes 1: nv1
    actions = submit(sched, job("x2", gpus=4, replicas=2, topology=topo(required=NVL)))
    assert nodes_of(actions, "x2") == ["g0", "g1"]
    actions = submit(sched, job("y", gpus=4, replicas=2, topology=topo(required=NVL)), now=1)
    assert nodes_of(actions, "y") == ["g2", "g3"]
    actions = submit(sched, job("z", gpus=4, replicas=2, topology=topo(required=NVL)), now=2)
    assert pending(actions, "z")[0] == (
        "topology (required nvlink-domain): no nvlink-domain has room for 2 tasks "
        "(most: nvlink-domain h0 with 1)"
    )


def test_unknown_level_is_unresolvable() -> None:
    sched = core(two_blocks())
    actions = submit(sched, job("x", gpus=1, topology=topo(required="net/zone")))
    assert pending(actions, "x")[0] == (
        "topology: the cluster has no level 'net/zone' (its levels: net/block, net/rack)"
    )


def test_preemption_for_a_required_rack_stays_inside_the_rack_that_needs_fewest() -> None:
    state = ClusterState(two_blocks())
    state.set_topology((BLOCK, RACK))
    profile = {"queue_sort": "priority", "score": ["bestfit"], "post_filter": ["preemption"]}
    sched = Scheduler(state, parse_profile(profile))
    rack = topo(required=RACK)
    keep = job("keep", gpus=4, replicas=4, preemptible=False, topology=rack)
    assert nodes_of(submit(sched, keep), "keep") == ["c0", "c1", "c2", "c3"]
    assert nodes_of(submit(sched, job("lo1", gpus=4, topology=rack), now=1), "lo1") == ["a0"]
    assert nodes_of(submit(sched, job("lo2", gpus=4, topology=rack), now=2), "lo2") == ["a1"]
    lo3 = job("lo3", gpus=4, replicas=2, priority=5, topology=rack)
    assert nodes_of(submit(sched, lo3, now=3), "lo3") == ["a2", "a3"]
    hi = job("hi", gpus=4, replicas=2, priority=10, topology=rack)
    actions = submit(sched, hi, now=10)
    # r1 would take 2 victims (lo1, lo2), r2 one (lo3), r3 none may go: lo3 alone, though
    # the lower-priority pair would have made room across the cluster's racks as well
    assert sorted(a.job_id for a in actions if isinstance(a, Preempt)) == ["lo3"]


def test_a_job_no_domain_could_ever_hold_is_unresolvable() -> None:
    sched = core(two_blocks())
    # racks hold at most 16 GPUs (r3): 5 tasks of 4 GPUs never fit one, even empty
    actions = submit(sched, job("x", gpus=4, replicas=5, topology=topo(required=RACK)))
    (found,) = [a for a in actions if isinstance(a, Pending)]
    assert found.explanation.code.value == "unresolvable"
    assert found.explanation.summary == (
        "topology (required rack): no rack could hold its 5 tasks even when empty "
        "(largest: rack r3 with 4)"
    )
    # preferring a rack, it runs: no block holds 5 either (b1 and b2 hold 4 each), so it
    # spans the fewest blocks, the largest first (b1 on the tie), each rack filled in turn
    actions = submit(sched, job("y", gpus=4, replicas=5, topology=topo(preferred=RACK)), now=1)
    assert nodes_of(actions, "y") == ["a0", "a1", "a2", "a3", "c0"]


def test_backfill_reserves_the_rack_the_head_requires() -> None:
    # r1 = a0, a1 and r2 = b0, b1, 4 GPUs each
    nodes = [_node("a0", "b", "r1"), _node("a1", "b", "r1")]
    nodes += [_node("b0", "b", "r2"), _node("b1", "b", "r2")]
    state = ClusterState(nodes)
    state.set_topology((BLOCK, RACK))
    profile = {"queue_sort": {"name": "fifo", "args": {"mode": "strict"}}}
    sched = Scheduler(
        state, parse_profile({**profile, "score": ["bestfit"], "backfill": {"enabled": True}})
    )
    rack = topo(required=RACK)
    h = Harness(sched)
    h.submit(
        [
            job("j1", gpus=4, estimated_runtime_s=10.0, topology=rack),  # a0 (r1 best fits)
            job("j2", gpus=4, estimated_runtime_s=30.0, topology=rack),  # a1 (r1 holds 1)
            job("j3", gpus=4, estimated_runtime_s=30.0, topology=rack),  # b0
            # no rack has 2 free nodes before t=30 (a0 + b1 at t=10 span two racks)
            job("head", gpus=4, replicas=2, estimated_runtime_s=10.0, topology=rack),
            # b1 until t=25 cannot delay a start at t=30: backfilled at once
            job("long", gpus=4, estimated_runtime_s=25.0),
        ]
    )
    h.run(100.0)
    assert {a.job_id: t for t, a in h.actions(Bind)} == {
        "j1": 0,
        "j2": 0,
        "j3": 0,
        "long": 0,
        "head": 30,
    }
    assert sched.record("head").reserved_starts == [30.0]


def test_later_tasks_of_a_running_gang_join_its_domain() -> None:
    sched = core(two_blocks())
    _r3_mostly_full(sched)  # racks hold r1 2, r2 2, r3 1 task of 4 GPUs
    # 4 tasks, 2 at once, required rack: no rack holds 4; r1 (the first of the largest)
    # takes 2 and the job starts; its other 2 never leave r1, though r2 has room
    x = job("x", gpus=4, replicas=4, gang=2, topology=topo(required=RACK))
    assert nodes_of(submit(sched, x, now=1), "x") == ["a0", "a1"]
    sched.handle([], 2.0)
    assert sorted(p.node for p in sched.view.job("x").placements.values()) == ["a0", "a1"]
    sched = core(two_blocks())
    _r3_mostly_full(sched)
    y = job("y", gpus=4, replicas=4, gang=2, topology=topo(preferred=RACK))
    actions = submit(sched, y, now=1)
    # preferring a rack: all 4 at once inside block b1 (r1, then r2) beats 2 in one rack
    assert nodes_of(actions, "y") == ["a0", "a1", "a2", "a3"]


def test_a_spread_preferred_gang_consolidates_into_one_rack_once_one_holds_it() -> None:
    # r1 = a0, a1, a2 and r2 = b0, b1, b2 (4 GPUs each)
    nodes = [_node(f"a{i}", "b", "r1") for i in range(3)]
    nodes += [_node(f"b{i}", "b", "r2") for i in range(3)]
    state = ClusterState(nodes)
    state.set_topology((BLOCK, RACK))
    migration = {"min_runtime_s": 0, "consolidate": {"enabled": True}}
    sched = Scheduler(state, parse_profile({"score": ["bestfit"], "migration": migration}))
    rack = topo(required=RACK)
    assert nodes_of(submit(sched, job("o1", gpus=4, replicas=2, topology=rack)), "o1") == [
        "a0",
        "a1",
    ]
    assert nodes_of(submit(sched, job("o2", gpus=4, replicas=2, topology=rack)), "o2") == [
        "b0",
        "b1",
    ]
    # no rack holds 2 now: spread over the block, r1 first (a2), then r2 (b2)
    spread = job("p", gpus=4, replicas=2, checkpoint=Checkpointing(), topology=topo(preferred=RACK))
    assert nodes_of(submit(sched, spread), "p") == ["a2", "b2"]
    # o1 ends: r1 has a0 and a1 free; p moves there (its old places held until it stops)
    actions = sched.handle([TaskFinished("o1", t, 1) for t in range(2)], 10.0)
    (move,) = [a for a in actions if isinstance(a, Migrate)]
    assert move.job_id == "p" and str(move.kind) == "consolidation"
    assert sorted(p.node for _, p in move.placements) == ["a0", "a1"]
