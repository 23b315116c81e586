"""Simulator replay throughput: a synthetic workload on a synthetic heterogeneous cluster.

    python bench/sim_replay.py --nodes 10000 --jobs 100000
    python bench/sim_replay.py --nodes 10000 --jobs 1000000 --json     # memory at scale
    python bench/sim_replay.py --nodes 1000 --jobs 10000 --cprofile 15
    python bench/sim_replay.py --nodes 1000 --jobs 10000 --tracemalloc 15

Generates the cluster (V100/P100/K80/A100 nodes) and the workload (Poisson arrivals at the
rate that offers ``--load`` of the GPUs, Gavel's Philly GPU-count mix, Philly runtimes capped
at ``--max-duration``), replays it under FIFO, summarizes it as a report does (waits, JCT,
utilization) and prints wall time, CPU time, jobs per second, steps per second and the peak
resident memory of the process (``peak_rss_mib``: the whole run, report included).
``--summary`` adds the report's figures (to compare two versions of the code: they must
not change). ``--cprofile N`` prints the N functions with the most own time;
``--tracemalloc N`` the N places that allocated the most memory still held after the
replay, grouped by traceback (slow: for 10k-100k jobs).

"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import platform
import pstats
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from hetsched.model.lifecycle import JobState
from hetsched.sim.engine import EngineConfig, Simulator
from hetsched.sim.metrics import summarize
from hetsched.sim.philly import RuntimeDistribution
from hetsched.sim.synthetic import (
    SyntheticSpec,
    generate,
    gpus_per_node,
    rate_for_load,
    synthetic_cluster,
)

PHILLY = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly" / "philly_runtime.csv"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--load", type=float, default=0.8, help="offered GPU load, 0..1")
    parser.add_argument("--max-duration", type=float, default=2 * 86400.0, help="seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tick", type=float, default=60.0)
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="N")
    parser.add_argument("--summary", action="store_true", help="add the report's figures")
    parser.add_argument("--json", action="store_true", help="one JSON line instead of text")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    nodes = synthetic_cluster(args.nodes, args.seed)
    durations = (
        RuntimeDistribution.from_file(PHILLY, args.max_duration)
        if PHILLY.is_file()
        else RuntimeDistribution(max_s=args.max_duration)
    )
    spec = SyntheticSpec(
        jobs=args.jobs,
        users=32,
        queues=4,
        durations=durations,
        gpus_per_node=max(gpus_per_node(nodes).values()),
        model_gpus_per_node=gpus_per_node(nodes),
        seed=args.seed,
    )
    spec = dataclasses.replace(spec, rate_per_h=rate_for_load(spec, nodes, args.load))
    workload = generate(spec)
    setup_s = time.perf_counter() - started

    if args.tracemalloc:
        tracemalloc.start(12)
        before = tracemalloc.take_snapshot()
    simulator = Simulator(nodes, workload, None, args.seed, EngineConfig(tick_s=args.tick))
    profiler = cProfile.Profile() if args.cprofile else None
    started, cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    result = simulator.run()
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    if args.tracemalloc:
        _print_allocations(before, tracemalloc.take_snapshot(), args.tracemalloc, args.jobs)
    summary = summarize(result)
    done = summary.states.get(JobState.SUCCEEDED, 0)
    row: dict[str, Any] = {
        "nodes": args.nodes,
        "gpus": sum(len(n.devices) for n in nodes),
        "jobs": args.jobs,
        "load": args.load,
        "succeeded": done,
        "setup_s": round(setup_s, 2),
        "replay_s": round(wall, 2),
        "replay_cpu_s": round(cpu, 2),
        "jobs_per_s": round(args.jobs / wall, 1),
        "steps": result.steps,
        "steps_per_s": round(result.steps / wall, 1),
        "max_queue": max(result.series.queued, default=0),
        "virtual_days": round(result.end_time / 86400, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "python": platform.python_version(),
    }
    if args.summary:
        row["summary"] = summary.to_dict()
    if args.json:
        print(json.dumps(row))
    else:
        for key, value in row.items():
            print(f"{key:>13}: {value}")
    if profiler is not None:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("tottime").print_stats(args.cprofile)
        print(out.getvalue(), file=sys.stderr)
    return 0


def _print_allocations(
    before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int, jobs: int
) -> None:
    """What the replay allocated and still holds, by traceback, per job of the workload."""
    stats = after.compare_to(before, "traceback")
    total = sum(s.size_diff for s in stats)
    print(
        f"held after the replay: {total / 2**20:.1f} MiB, {total / jobs:.0f} B/job", file=sys.stderr
    )
    for stat in stats[:top]:
        print(f"{stat.size_diff / jobs:8.1f} B/job {stat.count_diff:>9} blocks", file=sys.stderr)
        for line in stat.traceback.format(limit=4, most_recent_first=True):
            print(f"    {line}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
