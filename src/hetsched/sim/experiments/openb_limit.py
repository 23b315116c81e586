"""The limit of an openb run: an offline packing and the lower bound, at given arrival points.

For one trace and seed, every policy faces the same arrival sequence (:func:`run_openb`'s
shuffle and resampling); at X % arrived workload the same pods have arrived
(:func:`~hetsched.sim.experiments.openb_bound.arrived_prefix`). For each point this module reports:

- **the lower bound** on unallocated GPU %: no packing of those pods, online or offline,
  leaves fewer GPUs unallocated (:mod:`hetsched.sim.experiments.openb_bound`);
- **the offline packing**: what a packer that sees all those pods at once achieves. It
  may reorder the pods; like a policy, it places each pod that fits somewhere at its turn
  and drops the rest. Four orders run and the best counts:

  - ``ffd``: first-fit decreasing. Largest GPU request first, then largest CPU, then
    memory, non-GPU pods last; each pod takes the first node in list order that hosts it
    (the ``fit`` filter), a shared pod the fullest GPU of that node with room;
  - ``hardest-first``: the ``best`` policy's placement, fed multi-GPU pods first (most
    GPUs first), then pods limited to some GPU models, then whole-GPU and large shares
    (above half a GPU) in arrival order, then small shares from the largest down,
    non-GPU pods last;
  - ``lp-guided``: the ``best`` policy's placement, fed the pods the bound's optimum keeps
    (arrival order), then those it leaves out (of each shape, the latest arrivals), then
    non-GPU pods: the packer gets to choose, as the LP does, which pods not to fit;
  - ``arrival-order``: the ``best`` policy in arrival order, i.e. the online run itself,
    so the offline packing is never worse than ``best`` online.

  All are real packings, so the best possible lies between the bound and the best of
  them. None is optimal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.profile import ProfileSpec, parse_profile
from hetsched.framework.runtime import Framework
from hetsched.model.device import SHARE_UNITS, Node
from hetsched.model.job import Job, TaskRequest
from hetsched.sim.alibaba import TracePod
from hetsched.sim.experiments.openb import (
    TUNE_RATIO,
    OpenbTrace,
    policy_profile,
    target_classes,
    tune_workload,
)
from hetsched.sim.experiments.openb_bound import (
    Bound,
    Shape,
    allocation_bound,
    arrived_prefix,
    shape_of,
)

__all__ = ["HEURISTICS", "LIMIT_POINTS", "LimitResult", "limit_steps", "offline_pack", "run_limit"]

#: arrived-workload percentages the limit is computed at
LIMIT_POINTS = (100, 130)


def _ffd_order(pods: Sequence[TracePod], bound: Bound) -> list[TracePod]:
    return sorted(
        pods, key=lambda p: (p.num_gpu == 0, -p.gpu_total_milli, -p.cpu_milli, -p.memory_mib)
    )


def _hardest_first_order(pods: Sequence[TracePod], bound: Bound) -> list[TracePod]:
    def key(item: tuple[int, TracePod]) -> tuple[int, int, int]:
        index, pod = item
        if pod.num_gpu == 0:
            return (4, 0, index)
        if pod.num_gpu > 1:
            return (0, -pod.num_gpu, index)
        if pod.models:
            return (1, 0, index)
        if 2 * pod.gpu_milli > SHARE_UNITS:
            return (2, 0, index)
        return (3, -pod.gpu_milli, index)

    return [pod for _, pod in sorted(enumerate(pods), key=key)]


def _lp_guided_order(pods: Sequence[TracePod], bound: Bound) -> list[TracePod]:
    """The pods the bound's optimum keeps, in arrival order, then the ones it leaves out
    (of each shape, the latest arrivals), then non-GPU pods."""
    leave = {shape: round(count) for shape, count in bound.dropped.items()}
    left_out: list[TracePod] = []
    kept: list[TracePod] = []
    for pod in reversed(pods):
        shape = shape_of(pod)
        if leave.get(shape, 0) > 0:
            leave[shape] -= 1
            left_out.append(pod)
        else:
            kept.append(pod)
    kept.reverse()
    left_out.reverse()
    return [p for p in kept if p.num_gpu] + left_out + [p for p in kept if not p.num_gpu]


def _arrival_order(pods: Sequence[TracePod], bound: Bound) -> list[TracePod]:
    return list(pods)


def _firstfit_profile(trace: OpenbTrace, seed: int) -> ProfileSpec:
    return parse_profile(
        {
            "name": "offline-ffd",
            "prefilter": [],
            "filter": ["fit"],
            "score": ["firstfit"],
            "device_choice": "most_used",
        }
    )


def _best_profile(trace: OpenbTrace, seed: int) -> ProfileSpec:
    return policy_profile("best", seed, target_classes(trace.pods))


#: name -> (the order the pods are offered in, given the bound's optimum; the profile that
#: places them)
HEURISTICS: dict[
    str,
    tuple[
        Callable[[Sequence[TracePod], Bound], list[TracePod]],
        Callable[[OpenbTrace, int], ProfileSpec],
    ],
] = {
    "ffd": (_ffd_order, _firstfit_profile),
    "hardest-first": (_hardest_first_order, _best_profile),
    "lp-guided": (_lp_guided_order, _best_profile),
    "arrival-order": (_arrival_order, _best_profile),
}


def offline_pack(
    nodes: Sequence[Node], pods: Sequence[TracePod], profile: ProfileSpec, seed: int = 0
) -> int:
    """GPU milli-units allocated when ``pods`` are offered in this order under ``profile``;
    a pod that fits nowhere at its turn is dropped."""
    state = ClusterState(nodes)
    framework = Framework(profile, seed=seed)
    requests: dict[Shape, TaskRequest] = {}
    allocated = 0
    for index, pod in enumerate(pods):
        request = requests.get(shape_of(pod))
        if request is None:
            request = requests[shape_of(pod)] = pod.request()
        name = f"offline-{index}"
        placement = framework.select(CycleContext(state, Job(name, request), request))
        if placement is not None:
            state.allocate(name, placement)
            allocated += pod.gpu_total_milli
    return allocated


@dataclass(frozen=True, slots=True)
class LimitResult:
    """The limit of one (trace, seed), per arrival point (keys of the dicts)."""

    trace: str
    seed: int
    #: unallocated GPU % of the better offline heuristic
    offline_pct: dict[int, float]
    #: which heuristic that was
    offline_by: dict[int, str]
    #: every heuristic's unallocated GPU %
    heuristics_pct: dict[int, dict[str, float]]
    #: the lower bound on unallocated GPU %
    bound_pct: dict[int, float]
    wall_s: float

    def summary(self) -> dict[str, object]:
        """The ``bound`` part of ``hetsched sim openb --bound -o json``."""

        def points(values: dict[int, float]) -> dict[str, float]:
            return {str(p): round(v, 4) for p, v in values.items()}

        return {
            "lower_bound_unallocated_gpu_pct": points(self.bound_pct),
            "offline_unallocated_gpu_pct": points(self.offline_pct),
            "offline_heuristic": {str(p): h for p, h in self.offline_by.items()},
            "offline_heuristics_unallocated_gpu_pct": {
                str(p): {h: round(v, 4) for h, v in per.items()}
                for p, per in self.heuristics_pct.items()
            },
            "wall_s": round(self.wall_s, 3),
        }


def limit_steps(points: Sequence[int] = LIMIT_POINTS) -> int:
    """How many steps :func:`run_limit` reports: per point, the bound and each packing."""
    return len(points) * (1 + len(HEURISTICS))


def run_limit(
    trace: OpenbTrace,
    seed: int,
    points: Sequence[int] = LIMIT_POINTS,
    ratio: float = TUNE_RATIO,
    step: Callable[[str], None] | None = None,
) -> LimitResult:
    """The bound and the offline packings of ``trace`` under ``seed`` at ``points``;
    ``step`` is told each of the :func:`limit_steps` steps as it ends (for progress)."""
    started = time.perf_counter()
    capacity = trace.gpu_capacity_milli
    workload = tune_workload(trace.pods, capacity, np.random.default_rng(seed), ratio)
    offline: dict[int, float] = {}
    offline_by: dict[int, str] = {}
    heuristics: dict[int, dict[str, float]] = {}
    bound: dict[int, float] = {}
    for point in points:
        pods = workload[: arrived_prefix(workload, capacity, point)]
        optimum = allocation_bound(trace.nodes, pods)
        bound[point] = max(0.0, 100.0 - 100.0 * optimum.upper_milli / capacity)
        if step is not None:
            step(f"{point} %: lower bound")
        per: dict[str, float] = {}
        for name, (order, profile) in HEURISTICS.items():
            allocated = offline_pack(trace.nodes, order(pods, optimum), profile(trace, seed), seed)
            per[name] = 100.0 - 100.0 * allocated / capacity
            if step is not None:
                step(f"{point} %: offline packing by {name}")
        heuristics[point] = per
        offline_by[point] = min(per, key=lambda name: per[name])
        offline[point] = per[offline_by[point]]
    return LimitResult(
        trace.name,
        seed,
        offline,
        offline_by,
        heuristics,
        bound,
        time.perf_counter() - started,
    )
