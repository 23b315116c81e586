"""Simulator replay throughput: a synthetic workload on a synthetic heterogeneous cluster.

    python bench/sim_replay.py --nodes 10000 --jobs 100000
    python bench/sim_replay.py --nodes 1000 --jobs 10000 --cprofile 15

Generates the cluster (V100/P100/K80/A100 nodes) and the workload (Poisson arrivals at the
rate that offers ``--load`` of the GPUs, Gavel's Philly GPU-count mix, Philly runtimes capped
at ``--max-duration``), replays it under FIFO and prints wall time, jobs per second and
steps per second. ``--cprofile N`` prints the N functions with the most own time.

"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import platform
import pstats
import sys
import time
from pathlib import Path

from hetsched.sim.engine import EngineConfig, Simulator
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

    simulator = Simulator(nodes, workload, None, args.seed, EngineConfig(tick_s=args.tick))
    profiler = cProfile.Profile() if args.cprofile else None
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    result = simulator.run()
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - started
    done = sum(j.state == "succeeded" for j in result.jobs)
    row = {
        "nodes": args.nodes,
        "gpus": sum(len(n.devices) for n in nodes),
        "jobs": args.jobs,
        "load": args.load,
        "succeeded": done,
        "setup_s": round(setup_s, 2),
        "replay_s": round(wall, 2),
        "jobs_per_s": round(args.jobs / wall, 1),
        "steps": result.steps,
        "steps_per_s": round(result.steps / wall, 1),
        "max_queue": max(result.series.queued, default=0),
        "virtual_days": round(result.end_time / 86400, 1),
        "python": platform.python_version(),
    }
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


if __name__ == "__main__":
    raise SystemExit(main())
