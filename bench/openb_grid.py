"""Benchmark: the openb fragmentation grid and the time of one FGD run.

    .venv/bin/python bench/openb_grid.py                       # default trace, 6 x 10 seeds
    .venv/bin/python bench/openb_grid.py --traces all --out bench/results/openb-all

First times single runs (one process, nothing else of ours running): FGD and BestFit on the
first trace, seed 42, ``--repeat`` times each, median reported. Then runs the grid on all
cores and writes results.csv, report.md and plots to ``--out``. Results are not tests.
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

from hetsched.sim.openb import POLICIES, load_trace, run_openb
from hetsched.sim.openb_report import REFERENCE_AT_100, run_grid, write_outputs

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACES)
    parser.add_argument("--traces", default="default", help="comma-separated, or 'all'")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "openb")
    parser.add_argument("--repeat", type=int, default=3, help="single-run timings (0: skip)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()

    traces = list(REFERENCE_AT_100) if args.traces == "all" else args.traces.split(",")
    policies = args.policies.split(",")
    low, _, high = args.seeds.partition("-")
    seeds = list(range(int(low), int(high or low) + 1))
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, {platform.machine()}")

    if args.repeat:
        trace = load_trace(args.trace_dir, traces[0])
        for policy in ("fgd", "bestfit"):
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                result = run_openb(trace, policy, 42)
                times.append(time.perf_counter() - started)
            print(
                f"single run {traces[0]} {policy} seed 42: median {statistics.median(times):.2f} s "
                f"of {args.repeat} ({result.pods_arrived} pods, "
                f"{result.unallocated_gpu_pct[100]:.2f} % unallocated at 100 %)"
            )

    total = len(traces) * len(policies) * len(seeds)
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
