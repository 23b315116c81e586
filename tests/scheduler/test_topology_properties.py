"""Properties of placement inside network domains, over random labelled clusters (mixed
depths, partly used) and random gang jobs: a required job's tasks share one domain of its
level, each slice shares one domain of its slice level, tasks are rank-contiguous at every
level (in task order, a domain once left is never entered again), and an attempt that
fails holds nothing."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.device import Node
from hetsched.model.topology import TopologyRequest
from hetsched.scheduler import Bind, JobSubmitted, Scheduler

LEVELS = ("block", "rack", "nvl")


@st.composite
def clusters(draw: Any) -> list[Node]:
    nodes: list[Node] = []
    for b in range(draw(st.integers(1, 3))):
        for r in range(draw(st.integers(1, 3))):
            for n in range(draw(st.integers(1, 4))):
                labels = {"block": f"b{b}", "rack": f"r{r}"}
                if draw(st.booleans()):  # mixed depth: some nodes have no nvlink label
                    labels["nvl"] = f"v{n // 2}"
                if draw(st.integers(0, 9)) == 0:
                    labels.pop("rack")  # a node of a block without a rack
                name = f"b{b}r{r}n{n}"
                nodes.append(gpu_node(name, gpus=draw(st.sampled_from([2, 4, 8])), labels=labels))
    return nodes


def _runs_contiguous(sequence: list[object]) -> bool:
    seen: set[object] = set()
    previous: object = None
    for item in sequence:
        if item != previous and item in seen:
            return False
        seen.add(item)
        previous = item
    return True


@settings(max_examples=300, deadline=None)
@given(
    clusters(),
    st.lists(st.sampled_from([1, 2, 4]), max_size=6),
    st.integers(1, 12),
    st.sampled_from([1, 2, 4]),
    st.sampled_from(["required", "preferred"]),
    st.sampled_from(LEVELS),
    st.sampled_from([None, 2]),
)
def test_placements_stay_inside_domains_and_rank_contiguous(
    nodes: list[Node],
    background: list[int],
    tasks: int,
    gpus: int,
    kind: str,
    level: str,
    slices: int | None,
) -> None:
    state = ClusterState(nodes)
    state.set_topology(LEVELS)
    sched = Scheduler(state, parse_profile({"score": ["bestfit"]}))
    for i, size in enumerate(background):  # partly used, anywhere
        sched.handle([JobSubmitted(job(f"bg{i}", gpus=size))], float(i))
    tasks = tasks - tasks % 2 if slices and tasks > 1 else tasks
    inner = LEVELS[-1] if slices and tasks % 2 == 0 else None
    request = TopologyRequest(
        **{kind: level},  # type: ignore[arg-type]
        slice_size=2 if inner else None,
        slice_required=inner,
    )
    actions = sched.handle(
        [JobSubmitted(job("x", gpus=gpus, replicas=tasks, topology=request))], 9.0
    )
    binds = [a for a in actions if isinstance(a, Bind) and a.job_id == "x"]
    held = [key for key in state.allocations if str(key).startswith("x/")]
    if not binds:
        assert held == []  # a failed attempt gives back every domain it tried
        return
    assert len(held) == tasks
    rows = [state.row(p.node) for _, p in sorted(binds[0].placements)]
    net = state.network()
    assert net is not None
    assert len(rows) == tasks
    assert _runs_contiguous(rows)
    for depth in range(len(LEVELS)):
        domains = [int(net.of[depth][row]) for row in rows]
        assert _runs_contiguous(domains), (LEVELS[depth], domains)
        if kind == "required" and depth == LEVELS.index(level):
            assert len(set(domains)) == 1
    if inner is not None:
        depth = LEVELS.index(inner)
        for start in range(0, tasks, 2):
            pair = rows[start : start + 2]
            assert len({int(net.of[depth][row]) for row in pair}) == 1
