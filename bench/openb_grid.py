"""Benchmark: the openb fragmentation grid, its limit, and the time of one run per policy.

    .venv/bin/python bench/openb_grid.py                       # default trace, 7 x 10 seeds
    .venv/bin/python bench/openb_grid.py --traces all --bound --out bench/results/openb-all

First times single runs (one process, nothing else of ours running): FGD, best and BestFit
on the first trace, seed 42, ``--repeat`` rounds, the policies interleaved within a round
so that they see the same machine load; medians and best/FGD ratio reported. Then runs the
grid on all cores (with ``--bound``, also the offline packing and the lower bound of every
(trace, seed)) and writes results.csv, limits.csv, report.md and plots to ``--out``.
Results are not tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hetsched.sim.experiments.openb import POLICIES, OpenbTrace, load_trace, run_openb
from hetsched.sim.experiments.openb_report import REFERENCE_AT_100, run_grid, write_outputs

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"


def single_runs(trace: OpenbTrace, repeat: int) -> None:
    """FGD, best and BestFit on ``trace``, seed 42, interleaved ``repeat`` rounds."""
    policies = ("fgd", "best", "bestfit")
    times: dict[str, list[float]] = {p: [] for p in policies}
    results = {}
    for _ in range(repeat):
        for policy in policies:
            started = time.perf_counter()
            results[policy] = run_openb(trace, policy, 42)
            times[policy].append(time.perf_counter() - started)
    for policy in policies:
        result = results[policy]
        print(
            f"single run {trace.name} {policy} seed 42: median "
            f"{statistics.median(times[policy]):.2f} s of {repeat} ({result.pods_arrived} pods, "
            f"{result.unallocated_gpu_pct[100]:.2f} % unallocated at 100 %)"
        )
    ratios = [b / f for b, f in zip(times["best"], times["fgd"], strict=True)]
    print(
        f"best / fgd time, per round: {', '.join(f'{r:.2f}' for r in ratios)}; "
        f"median {statistics.median(ratios):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACES)
    parser.add_argument("--traces", default="default", help="comma-separated, or 'all'")
    parser.add_argument("--policies", default=",".join([*POLICIES, "best"]))
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "openb")
    parser.add_argument("--repeat", type=int, default=3, help="single-run timings (0: skip)")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--bound", action="store_true", help="also the offline packing and bound")
    args = parser.parse_args()

    traces = list(REFERENCE_AT_100) if args.traces == "all" else args.traces.split(",")
    policies = [p for p in args.policies.split(",") if p]
    low, _, high = args.seeds.partition("-")
    seeds = list(range(int(low), int(high or low) + 1))
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, {platform.machine()}")

    if args.repeat:
        single_runs(load_trace(args.trace_dir, traces[0]), args.repeat)

    total = len(traces) * len(seeds) * (len(policies) + (1 if args.bound else 0))
    with Progress(
        TextColumn("[bold]grid[/bold]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    ) as progress:
        task = progress.add_task("", total=total)
        grid = run_grid(
            args.trace_dir,
            traces,
            policies,
            seeds,
            args.workers,
            lambda _: progress.advance(task),
            bound=args.bound,
        )
    command = " ".join([".venv/bin/python", "bench/openb_grid.py", *sys.argv[1:]])
    paths = write_outputs(grid, args.out, command)
    print(f"grid: {total} runs in {grid.wall_s:.1f} s on {grid.workers} processes")
    print("wrote", ", ".join(str(p) for p in paths))
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        print(f"commit {rev}")
    except OSError:
        pass


if __name__ == "__main__":
    main()
