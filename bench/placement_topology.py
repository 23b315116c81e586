"""Gang placement with network topology through the full core (``bench/placement.py
--topology`` runs it).

A cluster of 8-GPU nodes in three labelled levels (block, rack, nvlink-domain of 4 nodes;
the host is the fourth, implicit) receives a stream of gang jobs of 2 to 32 tasks of 1, 2,
4 or 8 GPUs: 40% require one rack, 30% prefer one rack, 20% (gangs of at most 4) require
one nvlink domain, 10% require one block in slices of 4 tasks per rack. The cluster is kept
about half full: once the tasks running pass half the GPUs, the oldest job finishes before
the next one arrives. Each arrival (and finish) is one ``Scheduler.handle`` call.

Reported: task placements per second of wall time and per CPU second, CPU microseconds per
job (per arrival, its finishes included), the fraction of jobs started, and a digest of
every Bind in order (the same in every repeat). The same workload without topology runs
beside it for reference. With ``--racks`` several rack sizes at one node count show how
the cost per job moves as the number of domains grows.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from hetsched.cluster import ClusterState
from hetsched.framework import parse_profile
from hetsched.model.device import Device, Node
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.topology import TopologyRequest
from hetsched.scheduler import Bind, JobSubmitted, Scheduler, TaskFinished

LEVELS = ("network.hetsched.io/block", "network.hetsched.io/rack", "network.hetsched.io/nvlink")
BLOCK, RACK, NVLINK = LEVELS


def topology_cluster(nodes: int, rack_size: int, racks_per_block: int = 10) -> list[Node]:
    out: list[Node] = []
    for i in range(nodes):
        rack = i // rack_size
        labels = {BLOCK: f"b{rack // racks_per_block}", RACK: f"r{rack}", NVLINK: f"nv{i // 4}"}
        name = f"n{i:05d}"
        devices = tuple(
            Device(f"{name}/gpu{j}", "gpu", "nvidia", "H100", {"memory_gib": 80}) for j in range(8)
        )
        out.append(Node(name, 128_000, 1024 * 1024, devices, labels))
    return out


def topology_jobs(count: int, seed: int = 3, topology: bool = True) -> list[Job]:
    rng = np.random.default_rng(seed)
    requests = {
        g: TaskRequest(4000 * g, 32 * 1024 * g, (DeviceRequest.of("gpu", g),)) for g in (1, 2, 4, 8)
    }
    out: list[Job] = []
    for i in range(count):
        kind = rng.random()
        gpus = int(rng.choice([1, 2, 4, 8]))
        tasks = int(rng.choice([2, 4, 8, 16, 32]))
        if kind < 0.4:
            wants = TopologyRequest(required=RACK)
        elif kind < 0.7:
            wants = TopologyRequest(preferred=RACK)
        elif kind < 0.9:
            tasks = min(tasks, 4)
            gpus = 8 if tasks == 1 else gpus
            wants = TopologyRequest(required=NVLINK)
        else:
            tasks = max(4, tasks)
            wants = TopologyRequest(required=BLOCK, slice_size=4, slice_required=RACK)
        out.append(
            Job(f"j{i}", requests[gpus], replicas=tasks, topology=wants if topology else None)
        )
    return out


@dataclass
class TopologyResult:
    nodes: int
    racks: int
    topology: bool
    tasks_per_s: float
    tasks_per_cpu_s: float
    us_per_job: float
    started: float
    decisions: str


def run_core(
    nodes: list[Node], jobs: list[Job], topology: bool
) -> tuple[float, float, float, float, str]:
    """(tasks placed per s, per CPU s, CPU us per job, fraction started, digest)."""
    state = ClusterState(nodes)
    if topology:
        state.set_topology(LEVELS)
    core = Scheduler(state, parse_profile({"score": ["bestfit"]}))
    target = 8 * len(nodes) // 2
    running: deque[tuple[str, int, int, int]] = deque()
    live = placed = started = 0
    digest = hashlib.sha256()
    start, cpu_start = time.perf_counter(), time.process_time()
    for i, job in enumerate(jobs):
        batch: list[object] = [JobSubmitted(job)]
        while running and live >= target:
            job_id, run, tasks, gpus = running.popleft()
            batch += [TaskFinished(job_id, t, run) for t in range(tasks)]
            live -= tasks * gpus
        for action in core.handle(batch, float(i)):  # type: ignore[arg-type]
            if isinstance(action, Bind):
                gpus = core.view.job(action.job_id).job.resources.devices[0].primary.count
                running.append((action.job_id, action.run, len(action.placements), gpus))
                live += len(action.placements) * gpus
                placed += len(action.placements)
                started += 1
                digest.update(repr((action.job_id, action.placements)).encode())
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    us = cpu / len(jobs) * 1e6  # CPU time: steadier on a shared machine
    return placed / elapsed, placed / cpu, us, started / len(jobs), digest.hexdigest()[:16]


def bench_topology(
    sizes: list[int], rack_sizes: list[int], jobs: int, repeats: int
) -> list[TopologyResult]:
    out: list[TopologyResult] = []
    for size in sizes:
        for rack_size in rack_sizes:
            nodes = topology_cluster(size, rack_size)
            for topology in (True, False):
                work = topology_jobs(jobs, topology=topology)
                runs = [run_core(nodes, work, topology) for _ in range(repeats)]
                out.append(
                    TopologyResult(
                        size,
                        -(-size // rack_size),
                        topology,
                        statistics.median(r[0] for r in runs),
                        statistics.median(r[1] for r in runs),
                        statistics.median(r[2] for r in runs),
                        runs[0][3],
                        ",".join(sorted({r[4] for r in runs})),
                    )
                )
    return out


def print_table(results: list[TopologyResult]) -> None:
    print(
        "| nodes | racks | topology | task placements/s | per CPU s | CPU us/job | started "
        "| digest |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---|")
    for r in results:
        print(
            f"| {r.nodes:,} | {r.racks:,} | {'yes' if r.topology else 'no'} | "
            f"{r.tasks_per_s:,.0f} | {r.tasks_per_cpu_s:,.0f} | {r.us_per_job:,.0f} | "
            f"{r.started:.1%} | {r.decisions} |"
        )
