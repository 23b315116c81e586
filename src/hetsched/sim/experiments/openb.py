"""The openb fragmentation experiment (FGD, USENIX ATC '23), on hetsched's own framework.

One run, for a trace, a policy and a seed:

1. the cluster is the trace's GPU nodes (1,213 for openb);
2. the target workload M comes from the untuned pod list: pods keyed by
   (cpu, gpu_milli, num_gpu, gpu_spec), the most popular keys covering 95 % of pods;
3. the pods are sorted by name and shuffled with the seed, then resampled (uniform draws
   with replacement appended, or random pods removed) so that the GPU request is 130 % of
   the cluster's GPU capacity;
4. the pods arrive one at a time and never leave; each is placed by the policy's profile
   through :class:`~hetsched.framework.Framework` or, if it fits nowhere, dropped;
5. at every whole percent of arrived workload (GPU requested so far, failed pods included,
   over capacity) the run records unallocated GPU %, and the fragmentation amount and ratio
   under M (:mod:`hetsched.cluster.frag`).

Values at X % are those after the last arrival that keeps the arrived workload at or below
X % (130 %: the end of the run).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetsched.cluster.frag import TargetClass, TargetWorkload, cluster_frag
from hetsched.cluster.state import ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.profile import ProfileSpec, parse_profile
from hetsched.framework.runtime import Framework
from hetsched.model.device import SHARE_UNITS, Node
from hetsched.model.job import Job, TaskRequest
from hetsched.sim.alibaba import (
    NODE_FILE,
    TracePod,
    load_nodes,
    load_pods,
    model_selector,
    pod_file,
)
from hetsched.sim.experiments.openb_defrag import DefragOption, OpenbDefrag
from hetsched.sim.experiments.openb_variants import cpu_share_permille, cpu_variant

__all__ = [
    "ALL_POLICIES",
    "NEW_POLICIES",
    "POLICIES",
    "REPORT_POINTS",
    "OpenbResult",
    "OpenbTrace",
    "load_trace",
    "policy_profile",
    "run_openb",
    "target_classes",
    "tune_workload",
]

#: the six policies of the study, in the order its figures use
POLICIES = ("random", "dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")
#: hetsched's own: FGD with CPU balance and gap values, and ``best`` (the same, by alias)
NEW_POLICIES = ("fgdplus", "best")
ALL_POLICIES = POLICIES + NEW_POLICIES
#: arrived-workload percentages the JSON summary reports
REPORT_POINTS = (50, 80, 90, 100, 130)
#: the study's settings: workload to 130 % of GPU capacity, M covers 95 % of pods
TUNE_RATIO = 1.3
POPULARITY = 0.95


@dataclass(frozen=True, slots=True)
class OpenbTrace:
    """A loaded trace: the GPU nodes and the untuned pod list."""

    name: str
    nodes: tuple[Node, ...]
    pods: tuple[TracePod, ...]

    @property
    def gpu_capacity_milli(self) -> int:
        return SHARE_UNITS * sum(len(n.devices) for n in self.nodes)


def load_trace(trace_dir: Path, trace: str) -> OpenbTrace:
    """The GPU node list and the pod list ``trace``; raises TraceError on a bad file. A
    ``cpuXYZ`` name the trace has no file for is made from the default pod list
    (:mod:`hetsched.sim.experiments.openb_variants`)."""
    nodes = load_nodes(trace_dir / NODE_FILE)
    models = {d.model for n in nodes for d in n.devices}
    path = pod_file(trace_dir, trace)
    if not path.is_file() and cpu_share_permille(trace) is not None:
        # a CPU-heavy variant the trace has no file for: made from the default pod list
        default = load_pods(pod_file(trace_dir, "default"), models)
        return OpenbTrace(trace, tuple(nodes), tuple(cpu_variant(trace, default)))
    pods = load_pods(path, models)
    return OpenbTrace(trace, tuple(nodes), tuple(pods))


def target_classes(pods: Sequence[TracePod], popularity: float = POPULARITY) -> list[TargetClass]:
    """M: the most popular pod keys covering ``popularity`` of the pods, weighted by count.

    Keys are (cpu, gpu_milli, num_gpu, gpu_spec); memory is ignored. Equal counts keep the
    order of first appearance in the file.
    """
    counts = Counter((p.cpu_milli, p.gpu_milli, p.num_gpu, p.gpu_spec) for p in pods)
    ranked = sorted(counts.items(), key=lambda item: -item[1])  # stable: file order on ties
    kept: list[TargetClass] = []
    covered = 0
    for (cpu, milli, gpus, spec), count in ranked:
        models = sorted({m for m in spec.split("|") if m})
        selector = model_selector(models) if models else None
        kept.append(TargetClass(cpu, gpus, milli if gpus else 0, selector, float(count)))
        covered += count
        if covered >= popularity * len(pods):
            break
    return kept


def tune_workload(
    pods: Sequence[TracePod], capacity_milli: int, rng: np.random.Generator, ratio: float
) -> list[TracePod]:
    """Shuffle, then grow or shrink the pod list to ``ratio`` of GPU capacity.

    Growing appends uniform draws (with replacement) from the original list and stops at
    the first draw that would pass the target. As in the reference, that test compares the
    draw's per-GPU share, not its total, with the room left. Shrinking removes uniformly
    random pods until the request fits.
    """
    order = sorted(pods, key=lambda p: p.name)
    shuffled = [order[i] for i in rng.permutation(len(order))]
    target = ratio * capacity_milli
    total = sum(p.gpu_total_milli for p in shuffled)
    if total <= target:
        out = list(shuffled)
        while True:
            pick = order[int(rng.integers(len(order)))]
            if total + pick.gpu_milli > target:
                return out
            out.append(pick)
            total += pick.gpu_total_milli
    keep = np.ones(len(shuffled), np.bool_)
    for index in rng.permutation(len(shuffled)):
        if total <= target:
            break
        keep[index] = False
        total -= shuffled[index].gpu_total_milli
    return [p for p, k in zip(shuffled, keep, strict=True) if k]


def policy_profile(policy: str, seed: int, target: Sequence[TargetClass]) -> ProfileSpec:
    """The profile of one study policy: the fit filter and that policy's score alone.

    Baselines are configured to the reference formulas (CPU and GPU, not memory; integer
    scores); ties go to a seeded random node order, as the reference's randomised node names.
    """
    resources = {"cpu": 1, "memory": 0, "devices": 1}
    classes = [
        {
            "cpu_milli": c.cpu_milli,
            "count": c.count,
            "share": c.share,
            "selector": c.selector,
            "weight": c.weight,
        }
        for c in target
    ]
    scores: dict[str, dict[str, Any]] = {
        "random": {"seed": seed},
        "dotprod": {"prefer": "min", "weights": resources, "truncate": True},
        "gpuclustering": {},
        "gpupacking": {},
        "bestfit": {"weights": resources, "truncate": True},
        "fgd": {"target": classes},
        "fgdplus": {"target": classes},
        "best": {"target": classes},
    }
    if policy not in scores:
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(ALL_POLICIES)})")
    return parse_profile(
        {
            "name": f"openb-{policy}",
            "prefilter": [],
            "filter": ["fit"],
            "score": [{"name": policy, "args": scores[policy]}],
            "device_choice": "most_used",
            "tie_break": "random",
        }
    )


@dataclass(frozen=True, slots=True)
class OpenbResult:
    """One run. Curves are indexed by arrived-workload percent, 0..130."""

    trace: str
    policy: str
    seed: int
    pods_arrived: int
    pods_failed: int
    wall_s: float
    unallocated_gpu_pct: tuple[float, ...]
    frag_amount_pct: tuple[float, ...]
    frag_ratio_pct: tuple[float, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The JSON document of ``hetsched sim openb -o json``."""

        def points(curve: tuple[float, ...]) -> dict[str, float]:
            return {str(p): round(curve[p], 4) for p in REPORT_POINTS}

        return {
            "trace": self.trace,
            "policy": self.policy,
            "seed": self.seed,
            "unallocated_gpu_pct": points(self.unallocated_gpu_pct),
            "frag_amount_pct": points(self.frag_amount_pct),
            "frag_ratio_pct": points(self.frag_ratio_pct),
            "pods_arrived": self.pods_arrived,
            "pods_failed": self.pods_failed,
            "wall_s": round(self.wall_s, 3),
        }


def _moves(mover: OpenbDefrag) -> dict[str, Any]:
    """What ``extra`` says of a run with defragmentation."""
    most, budget = mover.most_moved
    return {
        "moved": mover.moved,
        "rescued": mover.rescued,
        "most_moved_per_arrival": most,
        "budget_then": budget,
        "work_spent": mover.work,
        "arrivals_not_planned": mover.skipped,
        "most_work_per_arrival": mover.most_work,
    }


@dataclass(slots=True)
class _Curves:
    """Unallocated GPU %, fragmentation amount % and ratio % of the cluster after each
    percent of arrived workload, up to ``top``."""

    state: ClusterState
    target: TargetWorkload
    capacity: int
    top: int
    #: told, as each percent is recorded, how far the run is (with the moves made so far)
    progress: Callable[[str], None] | None = None
    mover: OpenbDefrag | None = None
    values: tuple[list[float], list[float], list[float]] = field(
        default_factory=lambda: ([], [], [])
    )

    def record_until(self, percent: int) -> None:
        """The state now is the one at every percent not recorded yet, up to ``percent``."""
        frag = cluster_frag(self.state, self.target)
        allocated = self.capacity - frag.idle_milli
        unallocated, amount, ratio = self.values
        while len(unallocated) <= min(percent, self.top):
            unallocated.append(100.0 - 100.0 * allocated / self.capacity)
            amount.append(frag.amount_pct)
            ratio.append(frag.ratio_pct)
            if self.progress is not None:
                self.progress(self._done(len(unallocated) - 1))

    def _done(self, percent: int) -> str:
        text = f"{percent} % arrived"
        if self.mover is not None:
            text += f", {self.mover.moved} pods moved for {self.mover.rescued} arrivals"
        return text


def run_openb(
    trace: OpenbTrace,
    policy: str,
    seed: int,
    limit: int | None = None,
    ratio: float = TUNE_RATIO,
    defrag: DefragOption | None = None,
    progress: Callable[[str], None] | None = None,
) -> OpenbResult:
    """One run of the experiment; ``limit`` replays only the first pods (for quick checks).
    With ``defrag``, a pod that fits nowhere may move placed pods to make room
    (:mod:`hetsched.sim.experiments.openb_defrag`); ``extra`` then counts the moves.
    ``progress`` is called at each of the ``ratio * 100 + 1`` percents of arrived workload
    with how far the run is."""
    started = time.perf_counter()
    target_list = target_classes(trace.pods)
    capacity = trace.gpu_capacity_milli
    workload = tune_workload(trace.pods, capacity, np.random.default_rng(seed), ratio)
    if limit is not None:
        workload = workload[:limit]
    state = ClusterState(trace.nodes)
    framework = Framework(policy_profile(policy, seed, target_list), seed=seed)
    mover = OpenbDefrag(state, framework, defrag) if defrag is not None else None
    top = round(ratio * 100)
    curves = _Curves(state, TargetWorkload.of(target_list), capacity, top, progress, mover)
    failed = _place_all(workload, state, framework, mover, curves)
    curves.record_until(curves.top)
    return OpenbResult(
        trace.name,
        policy,
        seed,
        len(workload),
        failed,
        time.perf_counter() - started,
        tuple(curves.values[0]),
        tuple(curves.values[1]),
        tuple(curves.values[2]),
        {} if mover is None else _moves(mover),
    )


def _place_all(
    workload: Sequence[TracePod],
    state: ClusterState,
    framework: Framework,
    mover: OpenbDefrag | None,
    curves: _Curves,
) -> int:
    """Place the pods one by one (those that fit nowhere are dropped), recording the
    curves as the arrived workload crosses each percent; returns how many were dropped."""
    capacity = curves.capacity
    requests: dict[tuple[int, int, int, int, str], TaskRequest] = {}
    arrived = 0
    failed = 0
    for index, pod in enumerate(workload):
        after = arrived + pod.gpu_total_milli
        # the state now is the last one at or below every percent p with p% < after
        last = (100 * after - 1) // capacity
        if last >= len(curves.values[0]):
            curves.record_until(last)
        arrived = after
        key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)
        request = requests.get(key)
        if request is None:
            request = requests[key] = pod.request()
        name = f"{index}-{pod.name}"
        job = Job(name, request)
        placement = framework.select(CycleContext(state, job, request))
        if placement is None and mover is not None:
            placement = mover.place(name, job)
        if placement is None:
            failed += 1
        else:
            state.allocate(name, placement)
            if mover is not None:
                mover.placed(name, job, placement)
    return failed
