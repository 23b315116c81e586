"""The core's round mode: CPU time of one round boundary for N active jobs on 3 models.

N jobs of Gavel's continuous multi-GPU workload (seed 0), all submitted at t=0 with
continuous checkpoints, on 36:36:36 1-GPU nodes scaled with N (36 per model per 1,000
jobs). The first call submits them and runs the first boundary (solve, bind); each later
boundary (every round) follows one finished job and the stops of the round before, so the
set of jobs changes and the policy is solved again. Reported: CPU seconds of the first
call, and the median over ``--rounds`` later boundaries, per policy.

    .venv/bin/python bench/round_boundary.py                          # 1,000 jobs, las
    .venv/bin/python bench/round_boundary.py --jobs 1000 --policies las,ftf --rounds 5 -o json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

from hetsched.cluster.state import ClusterState
from hetsched.framework.profile import parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.scheduler import (
    Action,
    Bind,
    Event,
    JobSubmitted,
    Migrate,
    Preempt,
    Scheduler,
    TaskFinished,
    TaskStopped,
)
from hetsched.sim.experiments.round_modes import one_device_nodes
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs
from hetsched.sim.gavel_synth import GavelWorkloadSpec, generate_gavel


def _follow_up(actions: list[Action], running: dict[str, int]) -> list[Event]:
    """The stops of ``actions`` reported done, and one running job finished."""
    events: list[Event] = []
    for action in actions:
        if isinstance(action, Bind):
            running[action.job_id] = action.run
        elif isinstance(action, Preempt | Migrate):
            running.pop(action.job_id, None)
            events += [TaskStopped(action.job_id, t, action.run) for t in action.tasks]
    if running:
        job_id, run = next(iter(running.items()))
        del running[job_id]
        events.append(TaskFinished(job_id, 0, run, True))
    return events


def measure(jobs: int, policy: str, rounds: int) -> dict[str, float]:
    spec = GavelWorkloadSpec(jobs=jobs, rate_per_h=4, gpus_per_node=1, multi_gpu=True)
    workload = generate_gavel(spec, load_throughputs(BUNDLED_THROUGHPUTS))
    per_model = max(36, round(36 * jobs / 1000))
    nodes = one_device_nodes({"v100": per_model, "p100": per_model, "k80": per_model})
    profile = parse_profile({"rounds": {"policy": policy, "grace_s": 0, "min_runtime_s": 0}})
    core = Scheduler(ClusterState(nodes), profile)
    every = Checkpointing(interval_s=0, notice_s=0)
    submits: list[Event] = [
        JobSubmitted(dataclasses.replace(item.job, submit_time=0.0, checkpoint=every))
        for item in workload.jobs
    ]
    started = time.process_time()
    actions = core.handle(submits, 0.0)
    first = time.process_time() - started
    running: dict[str, int] = {}
    times = []
    for k in range(1, rounds + 1):
        events = _follow_up(actions, running)
        started = time.process_time()
        actions = core.handle(events, 360.0 * k)
        times.append(time.process_time() - started)
    return {"first_s": first, "boundary_median_s": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, nargs="+", default=[1000])
    parser.add_argument("--policies", default="las")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = parser.parse_args()
    rows = []
    for jobs in args.jobs:
        for policy in args.policies.split(","):
            row = {"jobs": jobs, "policy": policy, **measure(jobs, policy, args.rounds)}
            rows.append(row)
            if args.output == "text":
                print(
                    f"{jobs:>6} jobs {policy:>16}: first call {row['first_s']:.3f} s CPU, "
                    f"a boundary {row['boundary_median_s']:.3f} s CPU (median)"
                )
    if args.output == "json":
        print(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
