"""What topology awareness buys: a synthetic LLM-training workload on a cluster of blocks,
racks and NVLink domains, under a network cost (:mod:`hetsched.sim.network`), placed three
ways.

- **unaware**: jobs say nothing of the network; the profile's scores alone place them.
- **required**: each gang requires the narrowest level whose domains could hold it on an
  empty cluster (an NVLink domain, a rack, a block; larger gangs: anywhere).
- **preferred**: the same level, preferred (one such domain if any fits now, else as few
  domains of the broader levels as it can).

The cluster: ``blocks`` blocks of ``racks`` racks of ``nodes`` nodes, 8 GPUs each, NVLink
domains of 4 nodes. The workload: Poisson arrivals at ``load`` times what the cluster can
serve; gangs of 1 to 32 tasks of 8 GPUs (one node each; tensor-parallel groups) or of 1 to
8 tasks of 1, 2 or 4 GPUs, lognormal durations around 2 hours, measured alone on one NVLink
domain (so a gang spread over racks or blocks runs longer).

Reported per way: mean and 99th percentile job completion time, mean wait, GPU utilization
(busy GPUs over all; a gang slowed by the network keeps its GPUs longer), **fragmentation**
(the share of free GPUs outside wholly free NVLink domains, averaged over the moments a gang
starts: free capacity scattered over partly used domains, where the next large gang cannot
sit together) and how many gangs of more than one node ran inside each level.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsched.drivers import Start
from hetsched.framework.profile import parse_profile
from hetsched.model.device import Device, Node
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.topology import TopologyRequest
from hetsched.sim.engine import EngineConfig, Simulator
from hetsched.sim.metrics import summarize
from hetsched.sim.network import DEFAULT_FACTORS, NetworkCost
from hetsched.sim.workload import Workload, WorkloadJob

__all__ = [
    "LEVELS",
    "WAYS",
    "NVLinkSampled",
    "TopologyOutcome",
    "study",
    "study_cluster",
    "study_workload",
]

BLOCK = "network.hetsched.io/block"
RACK = "network.hetsched.io/rack"
NVLINK = "network.hetsched.io/nvlink-domain"
LEVELS = (BLOCK, RACK, NVLINK)
WAYS = ("unaware", "required", "preferred")
_NVLINK_NODES = 4


def study_cluster(blocks: int = 4, racks: int = 4, nodes: int = 8) -> list[Node]:
    out: list[Node] = []
    for b in range(blocks):
        for r in range(racks):
            for n in range(nodes):
                index = (b * racks + r) * nodes + n
                name = f"n{index:04d}"
                labels = {
                    BLOCK: f"b{b}",
                    RACK: f"b{b}-r{r}",
                    NVLINK: f"b{b}-r{r}-nv{n // _NVLINK_NODES}",
                }
                devices = tuple(
                    Device(f"{name}/gpu{i}", "gpu", "nvidia", "H100", {"memory_gib": 80})
                    for i in range(8)
                )
                out.append(Node(name, 128_000, 1024 * 1024, devices, labels))
    return out


def _level_for(nodes_needed: int, racks: int, rack_nodes: int) -> str | None:
    """The narrowest level whose empty domains hold ``nodes_needed`` nodes, or None."""
    if nodes_needed <= _NVLINK_NODES:
        return NVLINK
    if nodes_needed <= rack_nodes:
        return RACK
    if nodes_needed <= racks * rack_nodes:
        return BLOCK
    return None


def study_workload(
    cluster_gpus: int, jobs: int, load: float, seed: int, racks: int, rack_nodes: int
) -> list[tuple[Job, float, str | None]]:
    """(job without topology, duration, the level its gang fits) per job, in order."""
    rng = np.random.default_rng(seed)
    out: list[tuple[Job, float, str | None]] = []
    drawn: list[tuple[int, int, float]] = []
    for _ in range(jobs):
        if rng.random() < 0.6:
            tasks, gpus = (
                int(rng.choice([1, 2, 4, 8, 16, 32], p=[0.2, 0.2, 0.2, 0.2, 0.12, 0.08])),
                8,
            )
        else:
            tasks, gpus = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4]))
        drawn.append((tasks, gpus, float(rng.lognormal(np.log(2 * 3600), 0.6))))
    demand = sum(t * g * d for t, g, d in drawn) / len(drawn)
    rate = load * cluster_gpus / demand  # arrivals per second
    now = 0.0
    for index, (tasks, gpus, duration) in enumerate(drawn):
        now += float(rng.exponential(1 / rate))
        request = TaskRequest(gpus * 12_000, gpus * 96 * 1024, (DeviceRequest.of("gpu", gpus),))
        job = Job(f"j{index:04d}", request, replicas=tasks, submit_time=now)
        nodes_needed = -(-tasks * gpus // 8)
        out.append((job, duration, _level_for(nodes_needed, racks, rack_nodes)))
    return out


class NVLinkSampled(Simulator):
    """The simulator, sampling the fragmentation of NVLink domains as each gang starts."""

    fragments: list[float]

    def start_tasks(self, tasks: Sequence[Start], now: float) -> None:
        super().start_tasks(tasks, now)
        if not hasattr(self, "fragments"):
            self.fragments = []
        assert self.slowdown is not None
        state, net = self.scheduler.view.cluster, self.slowdown.net
        depth = net.depth(NVLINK)
        assert depth is not None
        free = state.dev_whole_free
        size = net.size(depth)
        per = np.bincount(net.of[depth], weights=free, minlength=size)
        whole = np.bincount(net.of[depth], weights=np.full(len(free), 8), minlength=size)
        total = float(per.sum())
        if total > 0:
            self.fragments.append(1.0 - float(per[per == whole].sum()) / total)


@dataclass(frozen=True, slots=True)
class TopologyOutcome:
    way: str
    jobs: int
    finished: int
    jct_mean_h: float
    jct_p99_h: float
    wait_mean_h: float
    utilization: float
    #: free GPUs outside wholly free NVLink domains over all free GPUs, mean over gang starts
    fragmentation: float
    #: gangs of more than one node by the narrowest level that held them
    spans: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _with_topology(job: Job, level: str | None, way: str) -> Job:
    if way == "unaware" or level is None:
        return job
    wants = (
        TopologyRequest(required=level) if way == "required" else TopologyRequest(preferred=level)
    )
    return dataclasses.replace(job, topology=wants)


def study(
    jobs: int = 300,
    load: float = 0.85,
    seed: int = 0,
    shape: tuple[int, int, int] = (4, 4, 8),
    factors: Mapping[str, float] | None = None,
    done: Callable[[str], None] | None = None,
) -> list[TopologyOutcome]:
    """Each way on the same workload (see the module docstring); ``shape``: blocks, racks
    per block, nodes per rack; ``done(way)`` is called as each way's run ends."""
    blocks, racks, rack_nodes = shape
    nodes = study_cluster(blocks, racks, rack_nodes)
    drawn = study_workload(8 * len(nodes), jobs, load, seed, racks, rack_nodes)
    cost = NetworkCost(LEVELS, dict(factors or DEFAULT_FACTORS))
    profile = parse_profile({"score": ["bestfit"]})
    out: list[TopologyOutcome] = []
    for way in WAYS:
        workload = Workload(
            tuple(WorkloadJob(_with_topology(j, level, way), d) for j, d, level in drawn),
            f"topology study ({way})",
        )
        sim = NVLinkSampled(nodes, workload, profile, seed, EngineConfig(network=cost))
        result = sim.run()
        summary = summarize(result)
        assert sim.slowdown is not None
        out.append(
            TopologyOutcome(
                way,
                summary.jobs,
                summary.states.get("succeeded", 0),
                summary.jct.get("mean", 0.0) / 3600,
                summary.jct.get("p99", 0.0) / 3600,
                summary.wait.get("mean", 0.0) / 3600,
                summary.utilization.get("H100", 0.0),
                float(np.mean(sim.fragments)) if sim.fragments else 0.0,
                dict(sorted(Counter(sim.slowdown.spans).items())),
            )
        )
        if done is not None:
            done(way)
    return out
