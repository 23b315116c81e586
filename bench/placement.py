"""Placement benchmark: placements per second and filter+score cost per job.

A synthetic heterogeneous cluster (8x A100, 8x H100, 4x V100, 2x T4, FPGA and CPU-only
nodes) receives a stream of tasks (whole, multi-GPU and fractional GPU requests, a third of
them with a model selector, some CPU-only and FPGA ones). The cluster is kept in a steady
state around half full: once the number of live tasks reaches a target, the oldest task is
released before the next placement, so every measurement places into a realistic mix of
partly used nodes.

    .venv/bin/python bench/placement.py                    # 1,000 / 5,000 / 10,000 nodes
    .venv/bin/python bench/placement.py --nodes 10000 --tasks 20000 --repeats 5 -o json
    .venv/bin/python bench/placement.py --score bestfit,stranding   # the default profile's scores
    .venv/bin/python bench/placement.py --distinct 20    # 20 distinct requests, repeated
    .venv/bin/python bench/placement.py --nodes 5000 --compare-src /path/to/older/checkout/src
    .venv/bin/python bench/placement.py --topology --nodes 5000 --tasks 1500 --racks 20
    .venv/bin/python bench/placement.py --topology --nodes 5000 --tasks 1000 --racks 100 20 5

``--topology`` measures gang placement inside network domains instead (see
``bench/placement_topology.py``): ``--tasks`` is then the number of gang jobs, ``--racks``
the nodes per rack (one row per size, with and without topology).

Reported per size (medians over repeats): placements/s through the framework (filter,
score, device choice, allocate, and the steady-state release) per second of wall time and
per second of this process's CPU time (steadier on a shared machine), filter+score time per job,
and events/s through the full core (Scheduler.handle with submit and finish events), and a
digest of every decision taken (each placement of the framework part, each Bind of the core
part, in order): the same in every repeat, and with ``--compare-src`` the same for both
checkouts unless a change altered a decision (the table then says so).

With ``--compare-src``, the script runs itself once per repeat for each of two checkouts
(that ``src/`` directory and this one), alternating, and prints both side by side: on a
shared machine a change of load then meets both. Every process first places a few hundred
tasks on a small cluster, untimed, so that what a process does once (building the CEL
parser's tables, about 0.09 s) is not counted as placement time in a one-run process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hetsched.cluster import ClusterState
from hetsched.framework import CycleContext, Framework, parse_profile
from hetsched.model.device import Device, Node
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.scheduler import Bind, JobSubmitted, Scheduler, TaskFinished
from placement_topology import bench_topology, print_table

GPU_TYPES = [  # (model, gpus per node, memory GiB, cpu cores, memory GiB, share of nodes)
    ("A100", 8, 80, 96, 1024, 0.30),
    ("H100", 8, 80, 128, 2048, 0.15),
    ("V100", 4, 32, 48, 384, 0.20),
    ("T4", 2, 16, 32, 192, 0.15),
]


def synthetic_cluster(nodes: int, seed: int = 0) -> list[Node]:
    rng = np.random.default_rng(seed)
    kinds = [*(t[0] for t in GPU_TYPES), "FPGA", "CPU"]
    weights = [*(t[5] for t in GPU_TYPES), 0.05, 0.15]
    picks = rng.choice(len(kinds), size=nodes, p=np.array(weights) / sum(weights))
    out: list[Node] = []
    for i, pick in enumerate(picks):
        name = f"n{i:05d}"
        if kinds[pick] == "CPU":
            out.append(Node(name, 128_000, 512 * 1024, labels={"zone": f"z{i % 3}"}))
            continue
        if kinds[pick] == "FPGA":
            devices = tuple(
                Device(f"{name}/fpga{j}", "fpga", "xilinx", "U250", {"memory_gib": 64})
                for j in range(2)
            )
            out.append(Node(name, 32_000, 128 * 1024, devices))
            continue
        model, count, gib, cores, mem, _ = GPU_TYPES[pick]
        devices = tuple(
            Device(f"{name}/gpu{j}", "gpu", "nvidia", model, {"memory_gib": gib})
            for j in range(count)
        )
        out.append(Node(name, cores * 1000, mem * 1024, devices, {"zone": f"z{i % 3}"}))
    return out


def synthetic_requests(count: int, seed: int = 1) -> list[TaskRequest]:
    rng = np.random.default_rng(seed)
    selectors = [
        'device.attributes["model"] in ["A100", "H100"]',
        'device.attributes["memory_gib"] >= 32',
        'device.attributes["model"] == "T4"',
    ]
    out: list[TaskRequest] = []
    for _ in range(count):
        kind = rng.random()
        cpu = int(rng.choice([1000, 2000, 4000, 8000]))
        mem = int(rng.choice([2, 8, 16, 32])) * 1024
        selector = str(rng.choice(selectors)) if rng.random() < 1 / 3 else None
        if kind < 0.10:
            devices: tuple[DeviceRequest, ...] = ()
        elif kind < 0.13:
            devices = (DeviceRequest.of("fpga", 1),)
        elif kind < 0.48:
            devices = (DeviceRequest.of("gpu", 1, int(rng.integers(1, 10)) * 100, selector),)
        else:
            gpus = int(rng.choice([1, 1, 1, 2, 4, 8]))
            devices = (DeviceRequest.of("gpu", gpus, 1000, selector),)
        out.append(TaskRequest(cpu, mem, devices))
    return out


@dataclass
class Result:
    nodes: int
    placements_per_s: float
    #: placements per second of this process's CPU time: steadier on a shared machine
    placements_per_cpu_s: float
    filter_score_us: float
    core_events_per_s: float
    placed_fraction: float
    #: sha256 (first 16 hex digits) of every decision of every repeat, in order
    decisions: str


def bench_framework(
    nodes: list[Node],
    requests: list[TaskRequest],
    live: int,
    scores: list[str] | None = None,
    decisions: Callable[[bytes], object] | None = None,
) -> tuple[float, float, float, float]:
    """Returns (placements/s, placements per CPU second, median filter+score microseconds
    per job, placed fraction). Each placement (or its absence) is told to ``decisions``."""
    state = ClusterState(nodes)
    framework = Framework(parse_profile({"score": scores or ["bestfit"]}))
    held: deque[str] = deque()
    placed = 0
    filter_score: list[float] = []
    start, cpu_start = time.perf_counter(), time.process_time()
    for i, request in enumerate(requests):
        if len(held) >= live:
            state.release(held.popleft())
        ctx = CycleContext(state, Job(f"j{i}", request), request)
        if i % 10 == 0:  # sample the filter+score cost on every tenth job
            t0 = time.perf_counter()
            mask = framework.feasible(ctx)
            rows = np.flatnonzero(mask)
            if rows.size:
                framework.scores(ctx, rows)
            filter_score.append(time.perf_counter() - t0)
        placement = framework.select(ctx)
        if decisions is not None:
            decisions(repr(placement).encode())
        if placement is not None:
            key = f"j{i}"
            state.allocate(key, placement)
            held.append(key)
            placed += 1
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return (
        len(requests) / elapsed,
        len(requests) / cpu,
        statistics.median(filter_score) * 1e6,
        placed / len(requests),
    )


def bench_core(
    nodes: list[Node],
    requests: list[TaskRequest],
    live: int,
    decisions: Callable[[bytes], object] | None = None,
) -> float:
    """Submit and finish events through Scheduler.handle, one event per call; events/s.
    Each Bind is told to ``decisions``."""
    core = Scheduler(ClusterState(nodes))
    running: deque[tuple[str, int]] = deque()
    events = 0
    start = time.perf_counter()
    for i, request in enumerate(requests):
        batch: list[object] = [JobSubmitted(Job(f"j{i}", request, submit_time=i))]
        if len(running) >= live:
            job_id, run = running.popleft()
            batch.append(TaskFinished(job_id, 0, run))
        for action in core.handle(batch, float(i)):  # type: ignore[arg-type]
            if isinstance(action, Bind):
                running.append((action.job_id, action.run))
                if decisions is not None:
                    decisions(repr((action.job_id, action.placements)).encode())
        events += len(batch)
    return events / (time.perf_counter() - start)


def compare(args: argparse.Namespace) -> None:
    """This script once per repeat for each checkout, alternating; medians side by side."""
    here = Path(__file__).resolve().parents[1] / "src"
    checkouts = [(str(args.compare_src), args.compare_src), ("this checkout", here)]
    argv = [sys.executable, __file__, "--tasks", str(args.tasks), "--repeats", "1"]
    argv += ["--distinct", str(args.distinct), "--score", args.score, "-o", "json", "--nodes"]
    argv += [str(n) for n in args.nodes]
    runs: dict[str, list[list[dict[str, float | str]]]] = {label: [] for label, _ in checkouts}
    for _ in range(args.repeats):
        for label, src in checkouts:
            env = dict(os.environ, PYTHONPATH=str(src))
            done = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
            runs[label].append(json.loads(done.stdout)["results"])
    print(f"load average {os.getloadavg()[0]:.1f}; {args.tasks} tasks, {args.repeats} runs each")
    print(
        "| nodes | checkout | placements/s | per CPU s | filter+score us/job | core events/s "
        "| decisions |"
    )
    print("|---:|---|---:|---:|---:|---:|---|")
    digests: set[str] = set()
    for index, nodes in enumerate(args.nodes):
        for label, _ in checkouts:
            rows = [r[index] for r in runs[label]]

            def med(key: str, rows: list[dict[str, float | str]] = rows) -> float:
                return statistics.median(float(r[key]) for r in rows)

            seen = {str(r["decisions"]) for r in rows}
            digests |= {f"{nodes}:{d}" for d in seen}
            print(
                f"| {nodes:,} | {label} | {med('placements_per_s'):,.0f} | "
                f"{med('placements_per_cpu_s'):,.0f} | {med('filter_score_us'):.0f} | "
                f"{med('core_events_per_s'):,.0f} | {', '.join(sorted(seen))} |"
            )
    if len(digests) == len(args.nodes):
        print("decisions: the same in every run of both checkouts")
    else:
        print("decisions: DIFFERENT between runs or checkouts (see the digests)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--tasks", type=int, default=10_000, help="placements per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    parser.add_argument(
        "--distinct",
        type=int,
        default=0,
        help="draw the tasks from only this many distinct requests (0: as drawn, ~830 in 10,000)",
    )
    parser.add_argument(
        "--score", default="bestfit", help="score plugins of the framework part, comma-separated"
    )
    parser.add_argument(
        "--compare-src",
        type=Path,
        help="also run the src/ directory of another checkout, alternating repeat by repeat",
    )
    parser.add_argument(
        "--topology", action="store_true", help="gang placement inside network domains"
    )
    parser.add_argument(
        "--racks", type=int, nargs="+", default=[20], help="with --topology: nodes per rack"
    )
    args = parser.parse_args()
    if args.topology:
        results = bench_topology(args.nodes, args.racks, args.tasks, args.repeats)
        if args.output == "json":
            print(json.dumps({"results": [r.__dict__ for r in results]}, indent=2))
        else:
            print_table(results)
        return
    if args.compare_src is not None:
        compare(args)
        return
    scores = [s.strip() for s in args.score.split(",") if s.strip()]
    results: list[Result] = []
    for size in args.nodes:
        nodes = synthetic_cluster(size)
        requests = synthetic_requests(args.tasks)
        if args.distinct:
            requests = [requests[i % args.distinct] for i in range(args.tasks)]
        live = size * 2  # about half of the GPU capacity in use at steady state
        # untimed: what a process does once (the CEL parser's tables, first calls), which
        # --compare-src would otherwise time in every run (one run per process)
        bench_framework(synthetic_cluster(50), requests[:500], 100, scores)
        decisions = hashlib.sha256()
        runs = [
            bench_framework(nodes, requests, live, scores, decisions.update)
            for _ in range(args.repeats)
        ]
        core = [
            bench_core(nodes, requests[: args.tasks // 2], live, decisions.update)
            for _ in range(args.repeats)
        ]
        results.append(
            Result(
                size,
                statistics.median(r[0] for r in runs),
                statistics.median(r[1] for r in runs),
                statistics.median(r[2] for r in runs),
                statistics.median(core),
                statistics.median(r[3] for r in runs),
                decisions.hexdigest()[:16],
            )
        )
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "tasks": args.tasks,
        "repeats": args.repeats,
        "score": scores,
        "distinct": args.distinct,
    }
    if args.output == "json":
        print(json.dumps({"meta": meta, "results": [r.__dict__ for r in results]}, indent=2))
        return
    print(
        f"python {meta['python']} on {meta['machine']}; {args.tasks} tasks x {args.repeats} repeats"
    )
    header = (
        "nodes",
        "placements/s",
        "per CPU s",
        "filter+score us/job",
        "core events/s",
        "placed",
        "decisions",
    )
    widths = (7, 13, 10, 20, 14, 7, 16)
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for r in results:
        print(
            f"{r.nodes:>7} {r.placements_per_s:>13.0f} {r.placements_per_cpu_s:>10.0f} "
            f"{r.filter_score_us:>20.0f} "
            f"{r.core_events_per_s:>14.0f} {r.placed_fraction:>7.1%} {r.decisions:>16}"
        )


if __name__ == "__main__":
    main()
