"""Moves of running jobs keep their network domains: defragmentation and upgrades never take
a gang that requires a rack out of one rack (they move it when the new places share one),
and a preferred gang is never spread over more racks than it runs in; outcomes worked out
by hand on small labelled clusters."""

from __future__ import annotations

from typing import Any

import pytest

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.cluster.network import Network
from hetsched.framework.profile import parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.job import JobSpeed
from hetsched.model.topology import TopologyRequest
from hetsched.scheduler import (
    Bind,
    JobSubmitted,
    Migrate,
    Pending,
    Scheduler,
    TaskFinished,
    TaskStopped,
)
from hetsched.scheduler.migration import upgrade
from hetsched.scheduler.topology import keeps_topology

BLOCK, RACK, NVL = "net/block", "net/rack", "net/nvl"
SAVES = Checkpointing(interval_s=600, notice_s=20)
MIGRATION: dict[str, Any] = {"min_runtime_s": 0, "defrag": {"enabled": True, "min_interval_s": 0}}


def _core(racks: dict[str, str], models: dict[str, str] | None = None) -> Scheduler:
    """Nodes of 4 GPUs (model A unless ``models`` says), each in the rack ``racks`` names."""
    nodes = [
        gpu_node(name, gpus=4, model=(models or {}).get(name, "A"), labels={BLOCK: "b", RACK: r})
        for name, r in racks.items()
    ]
    state = ClusterState(nodes)
    state.set_topology((BLOCK, RACK))
    return Scheduler(state, parse_profile({"score": ["bestfit"], "migration": MIGRATION}))


def _bound(actions: list[Any]) -> dict[str, list[str]]:
    return {
        a.job_id: [p.node for _, p in sorted(a.placements)] for a in actions if isinstance(a, Bind)
    }


@pytest.mark.parametrize(
    ("b0_rack", "moved_to"),
    [
        # a2 (r1) and b0 (r2) have 2 GPUs free each: g would span two racks, so it stays
        ("r2", None),
        # all one rack: g moves to a2 and b0 and P takes a0
        ("r1", ["a2", "b0"]),
    ],
)
def test_defragmentation_never_moves_a_required_rack_gang_out_of_one_rack(
    b0_rack: str, moved_to: list[str] | None
) -> None:
    core = _core({"a0": "r1", "a1": "r1", "a2": "r1", "b0": b0_rack})
    # 8 tasks of 2 GPUs fill the nodes in order, two each (best fit: the fuller node first)
    fill = core.handle([JobSubmitted(job(f"q{i}", gpus=2)) for i in range(8)], 0.0)
    assert [nodes for _, nodes in sorted(_bound(fill).items())] == [
        [n] for n in ("a0", "a0", "a1", "a1", "a2", "a2", "b0", "b0")
    ]
    core.handle([TaskFinished("q0", 0, 1), TaskFinished("q2", 0, 1)], 1.0)
    # a0 and a1 have 2 free each: r1 holds g's 2 tasks of 2 GPUs (r2 none, or r1 best fit)
    gang = job("g", gpus=2, replicas=2, checkpoint=SAVES, topology=TopologyRequest(RACK))
    assert _bound(core.handle([JobSubmitted(gang)], 2.0)) == {"g": ["a0", "a1"]}
    core.handle([TaskFinished(q, 0, 1) for q in ("q1", "q4", "q6")], 3.0)
    # a0: g's task 0 and 2 free; a1 full; a2 and b0 2 free each: P (4 GPUs) fits nowhere,
    # unless g moves off a0, to a2 and b0 (best fit: the only places with room)
    actions = core.handle([JobSubmitted(job("P", gpus=4))], 10.0)
    moves = [a for a in actions if isinstance(a, Migrate)]
    if moved_to is None:
        assert moves == []
        (waiting,) = [a for a in actions if isinstance(a, Pending)]
        assert "would not make room" in str(waiting.explanation)
    else:
        (move,) = moves
        assert move.job_id == "g" and [p.node for _, p in sorted(move.placements)] == moved_to


def test_defragmentation_moves_nothing_for_a_waiting_gang_it_cannot_seat_in_one_rack() -> None:
    core = _core({"a0": "r1", "a1": "r1", "b0": "r2", "b1": "r2", "c0": "r3"})
    # two tasks of 2 GPUs per node in node order; j0 (on a0) alone may move
    jobs = [job(f"j{i}", gpus=2, checkpoint=SAVES if i == 0 else None) for i in range(10)]
    placed = _bound(core.handle([JobSubmitted(j) for j in jobs], 0.0))
    assert [placed[f"j{i}"] for i in (0, 2, 4, 6, 8)] == [["a0"], ["a1"], ["b0"], ["b1"], ["c0"]]
    core.handle([TaskFinished(j, 0, 1) for j in ("j1", "j4", "j5", "j8")], 1.0)
    # a0: j0 + 2 free; a1, b1 full; b0 free; c0 2 free. P (2 tasks of 4 GPUs, one rack)
    # fits no rack; moving j0 to c0 would seat one task on a0 (r1) and one on b0 (r2), and
    # no move makes room in one rack: nothing moves
    wide = job("P", gpus=4, replicas=2, topology=TopologyRequest(RACK))
    actions = core.handle([JobSubmitted(wide)], 10.0)
    assert [a for a in actions if isinstance(a, Migrate)] == []
    (waiting,) = [a for a in actions if isinstance(a, Pending)]
    assert "would not make room" in str(waiting.explanation)


def test_defragmentation_makes_room_for_a_waiting_gang_inside_one_rack() -> None:
    core = _core({"a0": "r1", "a1": "r1", "b0": "r2", "b1": "r2", "c0": "r3"})
    # two tasks of 2 GPUs per node in node order; j6 (on b1) alone may move
    jobs = [job(f"j{i}", gpus=2, checkpoint=SAVES if i == 6 else None) for i in range(10)]
    placed = _bound(core.handle([JobSubmitted(j) for j in jobs], 0.0))
    assert [placed[f"j{i}"] for i in (0, 2, 4, 6, 8)] == [["a0"], ["a1"], ["b0"], ["b1"], ["c0"]]
    core.handle([TaskFinished(j, 0, 1) for j in ("j0", "j1", "j4", "j5", "j7", "j8")], 1.0)
    # a0 and b0 free; a1 full; b1: j6 + 2 free; c0: 2 free. P (2 tasks of 4 GPUs, one
    # rack) fits no rack now. Anywhere, its first task would take a0 (the first of the
    # equally free a0 and b0), the second b1 once j6 moves: two racks. Inside r2 (6 free
    # GPUs, more than r1's 4): b0, and b1 once j6 moves to c0
    wide = job("P", gpus=4, replicas=2, topology=TopologyRequest(RACK))
    actions = core.handle([JobSubmitted(wide)], 10.0)
    (move,) = [a for a in actions if isinstance(a, Migrate)]
    assert move.job_id == "j6" and [p.node for _, p in move.placements] == ["c0"]
    # j6 stops after its notice: it starts again on c0, and P in r2
    actions = core.handle([TaskStopped("j6", 0, 1)], 40.0)
    assert _bound(actions) == {"j6": ["c0"], "P": ["b0", "b1"]}


@pytest.mark.parametrize(("f1_rack", "moves"), [("r2", False), ("r1", True)])
def test_an_upgrade_never_moves_a_required_rack_gang_out_of_one_rack(
    f1_rack: str, moves: bool
) -> None:
    # s0 (model A) and f0 (model B) in r1; f1 (model B) in r1 or r2
    core = _core({"s0": "r1", "f0": "r1", "f1": f1_rack}, {"f0": "B", "f1": "B"})
    on_b = 'device.attributes["model"] == "B"'
    hogs = [job(f"hog{i}", gpus=2, selector=on_b) for i in range(2)]
    assert _bound(core.handle([JobSubmitted(h) for h in hogs], 0.0)) == {
        "hog0": ["f0"],
        "hog1": ["f0"],
    }
    assert _bound(core.handle([JobSubmitted(job("hog2", gpus=4, selector=on_b))], 0.0)) == {
        "hog2": ["f1"]
    }
    fast = JobSpeed({"A": 1.0, "B": 3.0})
    u = job("u", gpus=2, replicas=2, checkpoint=SAVES, speed=fast, topology=TopologyRequest(RACK))
    # the B nodes are full: s0 holds both tasks
    assert _bound(core.handle([JobSubmitted(u)], 1.0)) == {"u": ["s0", "s0"]}
    core.handle([TaskFinished("hog0", 0, 1), TaskFinished("hog2", 0, 1)], 2.0)
    # f0 has 2 B GPUs free, f1 4: best fit puts task 0 on the fuller f0, task 1 on f1
    record = core.record("u")
    assert upgrade(core, record, 100.0) is moves
    if moves:
        assert sorted(p.node for p in record.moving.values()) == ["f0", "f1"]


def test_keeps_topology_counts_domains_per_request() -> None:
    # r1 = n0, n1 (nvlink domains v0 = n0, v1 = n1); r2 = n2 (no nvlink label)
    labels = [{RACK: "r1", NVL: "v0"}, {RACK: "r1", NVL: "v1"}, {RACK: "r2"}]
    nodes = [gpu_node(f"n{i}", gpus=4, labels=lab) for i, lab in enumerate(labels)]
    net = Network((RACK, NVL), nodes)
    spread = [(0, 0), (1, 2)]  # task 0 on n0 (r1), task 1 on n2 (r2)
    together = [(0, 0), (1, 1)]  # both in r1, two nvlink domains
    assert keeps_topology(net, TopologyRequest(RACK), spread, together)
    assert not keeps_topology(net, TopologyRequest(RACK), together, spread)
    # preferred: no more racks than now (spread stays spread, together may not spread)
    assert keeps_topology(net, TopologyRequest(preferred=RACK), spread, spread)
    assert not keeps_topology(net, TopologyRequest(preferred=RACK), together, spread)
    # slices of 2 per nvlink domain: tasks 0 and 1 are one slice, over two domains
    sliced = TopologyRequest(RACK, None, 2, NVL)
    assert not keeps_topology(net, sliced, together, together)
    assert keeps_topology(net, sliced, together, [(0, 0), (1, 0)])
    assert keeps_topology(None, TopologyRequest(RACK), together, spread)  # no levels
