"""Round-policy solve time: one round's allocation for N active jobs on 3 device models.

The active jobs are the first N of Gavel's continuous multi-GPU workload (seed 0: its job
types, scale factors 1/2/4/8 and rates on V100, P100 and K80), on Gavel's 36:36:36 cluster
scaled with N (36 per model per 1,000 jobs, at least 36). Each has work left between 10%
and 100% of its total, an age up to 100 h and an isolated time of half of it, drawn with
a fixed seed; 20% have priority weight 5. Every policy (and its agnostic twin) is solved
``--repeats`` times; the median wall time is reported with the LPs it solved.

    .venv/bin/python bench/rounds_solve.py                       # 1,000 jobs
    .venv/bin/python bench/rounds_solve.py --jobs 100 1000 2000 --repeats 5 -o json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

from hetsched.rounds import PolicyOptions, RoundInput, policy_names, solve
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs
from hetsched.sim.gavel_synth import GavelWorkloadSpec, generate_gavel

MODELS = ("v100", "p100", "k80")


def round_input(jobs: int, seed: int = 0) -> RoundInput:
    table = load_throughputs(BUNDLED_THROUGHPUTS)
    workload = generate_gavel(GavelWorkloadSpec(jobs=jobs, multi_gpu=True, seed=seed), table)
    rng = np.random.default_rng(seed)
    items = workload.jobs
    thr = np.array([[item.job.speed.rates[m] for m in MODELS] for item in items])
    scale = np.array(
        [item.job.replicas * item.job.resources.devices[0].primary.count for item in items]
    )
    work = np.array([item.job.speed.work or 0.0 for item in items])
    elapsed = rng.uniform(0, 100 * 3600, jobs)
    per_model = max(36, round(36 * jobs / 1000))
    return RoundInput.of(
        [item.job.id for item in items],
        MODELS,
        thr,
        scale,
        [per_model] * 3,
        weight=np.where(rng.random(jobs) < 0.2, 5.0, 1.0),
        remaining=work * rng.uniform(0.1, 1.0, jobs),
        elapsed=elapsed,
        isolated_time=elapsed / 2,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, nargs="+", default=[1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--policies", default="all", help="comma-separated, or all")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = parser.parse_args()
    names = policy_names() if args.policies == "all" else args.policies.split(",")
    rows: list[dict[str, float | int | str]] = []
    for jobs in args.jobs:
        problem = round_input(jobs)
        for name in names:
            times, cpu = [], []
            for repeat in range(args.repeats):
                start, start_cpu = time.perf_counter(), time.process_time()
                result = solve(name, problem, PolicyOptions(seed=repeat))
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            assert result.check(problem) == [], result.check(problem)
            rows.append(
                {
                    "jobs": jobs,
                    "policy": name,
                    "median_s": statistics.median(times),
                    "max_s": max(times),
                    "cpu_median_s": statistics.median(cpu),
                    "lps": result.solves,
                }
            )
    meta = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
        "repeats": args.repeats,
    }
    if args.output == "json":
        print(json.dumps({"meta": meta, "results": rows}, indent=2))
        return
    print(f"python {meta['python']}, {meta['cpus']} cpus, load {meta['load']:.1f}")
    print(f"{'jobs':>6} {'policy':<26} {'median ms':>10} {'max ms':>9} {'CPU ms':>8} {'LPs':>4}")
    for row in rows:
        median, worst = 1000 * float(row["median_s"]), 1000 * float(row["max_s"])
        used = 1000 * float(row["cpu_median_s"])
        print(
            f"{row['jobs']:>6} {row['policy']:<26} {median:>10.1f} {worst:>9.1f} {used:>8.1f}"
            f" {row['lps']:>4}"
        )


if __name__ == "__main__":
    main()
