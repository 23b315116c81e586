"""The core's round mode against the round engine: one Gavel workload, mean JCT both ways.

The same jobs (Gavel's continuous workload, seed 0, the bundled throughputs) run through
the round engine (``hetsched sim replay --rounds``: devices counted per model, a round's
choice takes effect at once) and through the simulator driving the core with a ``rounds``
profile (``hetsched sim replay --profile``: placements on 1-GPU nodes, stops with a notice
and a grace, moves that wait for free devices). Each stop takes ``--grace`` seconds in the
core's run (after a ``--notice``; the jobs checkpoint continuously, so no work is lost).

    .venv/bin/python bench/round_mode_vs_engine.py                          # 4:4:4, 60 jobs
    .venv/bin/python bench/round_mode_vs_engine.py --cluster 8:8:8 --jobs 150 --rate 2 \\
        --policies las,agnostic-las,ftf --grace 0 30 -o json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from hetsched.sim.experiments.round_modes import compare_round_modes, one_device_nodes
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs
from hetsched.sim.gavel_synth import GavelWorkloadSpec, generate_gavel

MODELS = ("v100", "p100", "k80")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cluster", default="4:4:4", help="v100:p100:k80 devices")
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--rate", type=float, default=1.0, help="arrivals, jobs per hour")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--multi-gpu", action="store_true")
    parser.add_argument("--policies", default="las,agnostic-las")
    parser.add_argument("--grace", type=float, nargs="+", default=[0.0, 30.0])
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = parser.parse_args()
    counts = dict(zip(MODELS, (int(c) for c in args.cluster.split(":")), strict=True))
    spec = GavelWorkloadSpec(
        jobs=args.jobs,
        rate_per_h=args.rate,
        seed=args.seed,
        multi_gpu=args.multi_gpu,
        gpus_per_node=1,
    )
    workload = generate_gavel(spec, load_throughputs(BUNDLED_THROUGHPUTS))
    nodes = one_device_nodes(counts)
    rows = []
    for policy in args.policies.split(","):
        for grace in args.grace:
            started = time.process_time()
            result = compare_round_modes(nodes, workload, policy, grace_s=grace, notice_s=grace)
            row = {**result.to_dict(), "grace_s": grace, "cpu_s": time.process_time() - started}
            rows.append(row)
            if args.output == "text":
                print(
                    f"{policy:>16} grace {grace:>4g}s: engine {row['engine_jct_h']:.3f} h, "
                    f"core {row['core_jct_h']:.3f} h ({100 * row['difference']:+.2f} %); "
                    f"stops engine {row['engine_preemptions']}+{row['engine_migrations']} "
                    f"moves, core {row['core_preemptions']}+{row['core_migrations']} "
                    f"({row['cpu_s']:.1f} s CPU)"
                )
    if args.output == "json":
        machine = {"cpus": os.cpu_count(), "python": platform.python_version()}
        print(json.dumps({"args": vars(args), "machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
