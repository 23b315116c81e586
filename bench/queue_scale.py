"""Queue scale: replay time and per-event cost of the core against the size of the backlog.

A small cluster (``examples/clusters/mixed.yaml``) is offered more work than it can do
(``--load 1.5``), so the queue of pending jobs grows through the replay. The workloads are
the ones ``hetsched sim synth --cluster mixed.yaml --load 1.5 --users 6 --queues 3
--max-duration 12h --seed 3 --jobs N`` writes; each is replayed with ``--tick 0`` under each
policy, as ``hetsched sim replay --policies P --tick 0`` does.

    .venv/bin/python bench/queue_scale.py                          # 1k..16k, four policies
    .venv/bin/python bench/queue_scale.py --jobs 8000 16000 --policies drf
    .venv/bin/python bench/queue_scale.py --jobs 100000 --policies drf --buckets
    .venv/bin/python bench/queue_scale.py --jobs 110000 --standing 100000 --until 86400 \
        --policies drf --buckets                                   # 100,000 jobs wait from t=0
    .venv/bin/python bench/queue_scale.py --reference ...          # the full-sort cycle
    .venv/bin/python bench/queue_scale.py --service 50000          # hetsched up, 50,000 pending

Reported per (policy, jobs): replay wall time (the simulator's run, not the report) and the
CPU time of the process over it (steadier than wall time on a shared machine), events per
second, the largest and the mean backlog (jobs waiting after a step), and the ratio of
each run's time to the run with half as many jobs (wall time; CPU time with ``--cpu-ratio``).
With ``--repeats N`` each replay runs N times and the medians are reported.
``--standing N`` submits the first N jobs of each workload at t=0 and moves the later
arrivals earlier by as much (they keep their spacing), so a backlog of N stands from the
start and grows at a load above 1; ``--until`` stops the replay at that virtual time (the
jobs still waiting count as pending). With ``--buckets``, the cost of one ``handle`` call
(median and 99th percentile, microseconds) per backlog size at that call: below 1,000
pending, 1,000 to 10,000, 10,000 to 100,000, and above. ``--reference`` replays with the
full-sort cycle the incremental queue is checked against (when this version of the core has
one), to compare both side by side in one run.

``--service N`` measures the service instead (``bench/service_backlog.py``): ``hetsched up``
with N jobs pending, its submit latency, the dashboard's reads, a page by cursor, how soon a
finishing task's replacement starts, and its resident memory.

Another version of the code (the commit before the incremental queue, say) is measured
with the same script by putting its ``src`` first on ``PYTHONPATH``; the script uses only
the simulator's public surface.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import service_backlog
from hetsched.cluster.state import ClusterState
from hetsched.framework.profile import ProfileSpec, parse_profile
from hetsched.model.specs import load_cluster
from hetsched.scheduler import Scheduler
from hetsched.sim.engine import EngineConfig, Simulator
from hetsched.sim.philly import RuntimeDistribution
from hetsched.sim.synthetic import SyntheticSpec, generate, gpus_per_node, rate_for_load
from hetsched.sim.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
BUCKETS = ((0, 1_000), (1_000, 10_000), (10_000, 100_000), (100_000, 10**12))


def workload_for(nodes: list[Any], jobs: int, args: argparse.Namespace) -> Workload:
    """The workload ``hetsched sim synth`` writes for these parameters (with the first
    ``args.standing`` jobs moved to t=0, the rest as much earlier)."""
    spec = SyntheticSpec(
        jobs=jobs,
        users=args.users,
        queues=args.queues,
        gpus_per_node=max(gpus_per_node(nodes).values()),
        model_gpus_per_node=gpus_per_node(nodes),
        durations=RuntimeDistribution(max_s=args.max_duration),
        seed=args.seed,
    )
    spec = dataclasses.replace(spec, rate_per_h=rate_for_load(spec, nodes, args.load))
    workload = generate(spec)
    if not args.standing:
        return workload
    # the first N wait at t=0; the arrivals after them keep their spacing, from t=0 on, so
    # the backlog starts at N and grows from there (at a load above 1)
    items = workload.jobs
    shift = items[args.standing].job.submit_time if args.standing < len(items) else 0.0
    moved = [
        dataclasses.replace(
            item,
            job=dataclasses.replace(
                item.job, submit_time=0.0 if i < args.standing else item.job.submit_time - shift
            ),
        )
        for i, item in enumerate(items)
    ]
    return Workload(tuple(moved), workload.source)


class _Timed(Scheduler):
    """The core, with the wall time of every ``handle`` call recorded against its time."""

    calls: list[tuple[float, float]]

    def handle(self, events: Any, now: float) -> Any:
        started = time.perf_counter()
        actions = super().handle(events, now)
        self.calls.append((now, time.perf_counter() - started))
        return actions


def _factory(timed: bool, reference: bool) -> Any:
    def build(state: ClusterState, profile: ProfileSpec | None, seed: int) -> Scheduler:
        core: Scheduler = (_Timed if timed else Scheduler)(state, profile, seed)
        if timed:
            core.calls = []  # type: ignore[attr-defined]
        if reference:
            if not hasattr(core, "use_reference_cycle"):
                raise SystemExit("--reference: this version of the core has no reference cycle")
            core.use_reference_cycle()
        return core

    return build


def _buckets(core: Any, times: list[float], queued: list[int]) -> dict[str, dict[str, float]]:
    """Per backlog bucket: the median and p99 cost of one handle call (microseconds)."""
    costs: dict[int, list[float]] = {i: [] for i in range(len(BUCKETS))}
    for now, wall in core.calls:
        # the backlog the call found: the last sample taken before its time
        at = bisect.bisect_left(times, now) - 1
        pending = queued[at] if at >= 0 else 0
        for i, (low, high) in enumerate(BUCKETS):
            if low <= pending < high:
                costs[i].append(wall * 1e6)
    out: dict[str, dict[str, float]] = {}
    for i, values in costs.items():
        if values:
            values.sort()
            low, high = BUCKETS[i]
            name = f"{low}-{high}" if high < 10**12 else f"{low}+"
            out[name] = {
                "calls": len(values),
                "median_us": round(statistics.median(values), 1),
                "p99_us": round(values[min(len(values) - 1, int(len(values) * 0.99))], 1),
            }
    return out


def run_one(
    nodes: list[Any], workload: Workload, policy: str, args: argparse.Namespace
) -> dict[str, Any]:
    profile = parse_profile({"name": policy, "queue_sort": policy})
    simulator = Simulator(
        nodes,
        workload,
        profile,
        0,
        EngineConfig(tick_s=args.tick or None, until=args.until),
        core=_factory(args.buckets, args.reference),
    )
    started, cpu = time.perf_counter(), time.process_time()
    result = simulator.run()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu
    queued = result.series.queued
    row: dict[str, Any] = {
        "policy": policy,
        "jobs": len(workload),
        "replay_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "steps": result.steps,
        "handle_calls": result.handle_calls,
        "events_per_s": round(result.steps / wall, 1),
        "max_backlog": max(queued, default=0),
        "mean_backlog": round(statistics.fmean(queued), 1) if queued else 0.0,
        "succeeded": sum(j.state == "succeeded" for j in result.jobs),
    }
    if args.buckets:
        row["per_call"] = _buckets(simulator.scheduler, result.series.time, queued)
    return row


def _print_header() -> None:
    header = (
        "policy",
        "jobs",
        "replay s",
        "cpu s",
        "ratio",
        "events/s",
        "max backlog",
        "mean backlog",
    )
    widths = (10, 8, 10, 8, 7, 10, 12, 13)
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)), flush=True)


def _print_rows(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        ratio = f"{row['ratio']:.2f}" if row.get("ratio") is not None else "-"
        print(
            f"{row['policy']:>10} {row['jobs']:>8} {row['replay_s']:>10.2f} {row['cpu_s']:>8.2f} "
            f"{ratio:>7} "
            f"{row['events_per_s']:>10.0f} {row['max_backlog']:>12} {row['mean_backlog']:>13.0f}"
        )
        for bucket, cost in row.get("per_call", {}).items():
            print(
                f"{'':>10} pending {bucket:>14}: {cost['calls']:>7} calls, "
                f"median {cost['median_us']:>9.0f} us, p99 {cost['p99_us']:>9.0f} us"
            )
    print(end="", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cluster", type=Path, default=ROOT / "examples/clusters/mixed.yaml")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1000, 2000, 4000, 8000, 16000])
    parser.add_argument("--policies", default="fifo,priority,drf,fairshare", help="comma-separated")
    parser.add_argument("--load", type=float, default=1.5)
    parser.add_argument("--users", type=int, default=6)
    parser.add_argument("--queues", type=int, default=3)
    parser.add_argument("--max-duration", type=float, default=12 * 3600.0, help="seconds")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--tick", type=float, default=0.0, help="0: only the core's wakeups")
    parser.add_argument("--standing", type=int, default=0, help="jobs submitted at t=0")
    parser.add_argument("--until", type=float, default=None, help="stop at this virtual time")
    parser.add_argument("--buckets", action="store_true", help="per-call cost by backlog")
    parser.add_argument("--repeats", type=int, default=1, help="median of N replays")
    parser.add_argument("--cpu-ratio", action="store_true", help="ratios of CPU time")
    parser.add_argument("--reference", action="store_true", help="the full-sort cycle")
    parser.add_argument(
        "--service", type=int, default=0, help="N: hetsched up with N pending jobs (only that)"
    )
    parser.add_argument("--submits", type=int, default=300, help="with --service")
    parser.add_argument("--handovers", type=int, default=30, help="with --service")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = parser.parse_args()
    if args.service:
        result = service_backlog.run(args.service, args.submits, args.handovers, 20)
        if args.output == "json":
            print(json.dumps(result, indent=2))
        else:
            service_backlog.print_table(result)
        return
    nodes = load_cluster(args.cluster)
    workloads = {n: workload_for(nodes, n, args) for n in sorted(set(args.jobs))}
    rows: list[dict[str, Any]] = []
    if args.output == "table":
        _print_header()
    for policy in [p.strip() for p in args.policies.split(",") if p.strip()]:
        previous: dict[int, float] = {}
        for jobs in sorted(workloads):
            runs = [run_one(nodes, workloads[jobs], policy, args) for _ in range(args.repeats)]
            row = runs[0]
            for measure in ("replay_s", "cpu_s", "events_per_s"):
                row[measure] = statistics.median(r[measure] for r in runs)
            measure = "cpu_s" if args.cpu_ratio else "replay_s"
            half = previous.get(jobs // 2)
            row["ratio"] = round(row[measure] / half, 2) if half else None
            previous[jobs] = row[measure]
            rows.append(row)
            if args.output == "table":
                _print_rows([row])
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cluster": str(args.cluster),
        "load": args.load,
        "reference": args.reference,
    }
    if args.output == "json":
        print(json.dumps({"meta": meta, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
