"""Simulator replay throughput: a synthetic workload on a synthetic heterogeneous cluster.

    python bench/sim_replay.py --nodes 10000 --jobs 100000
    python bench/sim_replay.py --nodes 1000 --jobs 10000 --cprofile 15
    python bench/sim_replay.py --nodes 1000 --jobs 10000 --indexed-core

Generates the cluster (V100/P100/K80/A100 nodes) and the workload (Poisson arrivals at the
rate that offers ``--load`` of the GPUs, Gavel's Philly GPU-count mix, Philly runtimes capped
at ``--max-duration``), replays it under FIFO and prints wall time, jobs per second and
steps per second. ``--cprofile N`` prints the N functions with the most own time.

``--indexed-core`` replays with a subclass of the core whose ``waiting()`` reads an index of
waiting jobs instead of scanning every job ever submitted: a measurement of the change
proposed for the core (see docs/benchmarks.md), not a supported mode.
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hetsched.cluster.state import ClusterState
from hetsched.framework.profile import ProfileSpec
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import (
    Bind,
    DeviceHealthChanged,
    JobSubmitted,
    Kill,
    NodeRemoved,
    Preempt,
    Reject,
    Scheduler,
)
from hetsched.scheduler.records import JobRecord
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


class IndexedCore(Scheduler):
    """The core with the proposed waiting index: ids of jobs with tasks to place, refreshed
    for the jobs an event or action names (a full rescan only after node or device loss);
    and time-based rules that visit only jobs that can have a deadline."""

    def __init__(self, state: ClusterState, profile: ProfileSpec | None = None, seed: int = 0):
        super().__init__(state, profile, seed)
        self._index: dict[str, None] = {}
        self._touched: list[str] = []
        self._rescan = False
        self._runtime_limits = self.profile.timeouts.max_runtime_s is not None

    def handle(self, events: Iterable[Any], now: float) -> list[Any]:
        batch = list(events)
        for event in batch:
            if isinstance(event, JobSubmitted):
                self._touched.append(event.job.id)
                self._runtime_limits |= event.job.max_runtime_s is not None
            elif isinstance(event, NodeRemoved | DeviceHealthChanged):
                self._rescan = True
            elif hasattr(event, "job_id"):
                self._touched.append(event.job_id)
        actions = super().handle(batch, now)
        for action in actions:
            if isinstance(action, Bind | Kill | Preempt | Reject):
                self._refresh(action.job_id)
        return actions

    def waiting(self) -> list[JobRecord]:
        if self._rescan:
            self._index = dict.fromkeys(r.id for r in super().waiting())
            self._rescan = False
        for job_id in self._touched:
            self._refresh(job_id)
        self._touched.clear()
        return [self.jobs[j] for j in self._index]

    def _timers(self, now: float) -> list[Any]:
        # The second proposed change, emulated: time-based rules visit only the jobs that
        # can have a deadline. With no runtime limit anywhere, those are the waiting jobs
        # (gang holds, maximum pending time), so the scan covers the index, not every
        # running job. A deadline heap in the core would make this O(log n) per call.
        if self._runtime_limits:
            return list(super()._timers(now))
        live = self._live
        visited = {j: live[j] for j in self.waiting_ids() if j in live}
        self._live = dict(visited)
        try:
            return list(super()._timers(now))
        finally:
            for job_id in visited.keys() - self._live.keys():
                live.pop(job_id, None)  # ended by a rule (e.g. maximum pending time)
            self._live = live

    def waiting_ids(self) -> list[str]:
        self.waiting()  # refresh
        return list(self._index)

    def _refresh(self, job_id: str) -> None:
        record = self.jobs.get(job_id)
        waiting = record is not None and (
            record.state is JobState.PENDING
            or (
                record.state is JobState.RUNNING
                and record.job.gang_min < record.job.replicas
                and bool(record.unplaced)
            )
        )
        if waiting:
            self._index[job_id] = None
        else:
            self._index.pop(job_id, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--load", type=float, default=0.8, help="offered GPU load, 0..1")
    parser.add_argument("--max-duration", type=float, default=2 * 86400.0, help="seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tick", type=float, default=60.0)
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    parser.add_argument("--indexed-core", action="store_true")
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

    core = IndexedCore if args.indexed_core else Scheduler
    simulator = Simulator(
        nodes, workload, None, args.seed, EngineConfig(tick_s=args.tick), core=core
    )
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
        "core": "indexed" if args.indexed_core else "as is",
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
