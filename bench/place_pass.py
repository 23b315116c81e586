"""The scheduling pass of ``hetsched place`` alone: cluster state, one core cycle over every
job, the stranding report, for the inputs of ``bench/place_e2e.py`` (5,000 jobs on 5,000
nodes by default).

The YAML files are read and validated once, untimed (their cost is measured by
``place_e2e.py``); each repeat then builds a fresh cluster state and core from the parsed
nodes and jobs, submits every job in one ``handle`` call, and measures the stranded
accelerators, as ``place_jobs`` does, with the garbage collector paused as there. CPU time
of this process is reported beside wall time (the machine may be shared), with a digest of
every action the core returned: a change that alters a placement or an explanation shows
as another digest.

    .venv/bin/python bench/place_pass.py
    .venv/bin/python bench/place_pass.py --jobs 20000 --nodes 10000 --repeats 5
    .venv/bin/python bench/place_pass.py --compare-src /path/to/older/checkout/src

With ``--compare-src``, the script runs itself once per repeat for each of two checkouts
(that ``src/`` directory and this one), alternating, and prints both side by side.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hetsched.cluster.state import ClusterState
from hetsched.cluster.stranding import stranded_accelerators
from hetsched.framework.profile import load_profile
from hetsched.framework.speeds import load_speed_table
from hetsched.model.specs import load_cluster, load_jobs
from hetsched.plugins.stranding import profile_typicals
from hetsched.scheduler import Bind, JobSubmitted, Pending, Scheduler
from place_e2e import cluster_doc, jobs_doc


def measure(jobs: int, nodes: int, repeats: int) -> dict[str, object]:
    """Medians of (wall, CPU) seconds of the pass over ``repeats`` (after one untimed
    pass), with placements, pending jobs and the digest of the actions."""
    with tempfile.TemporaryDirectory() as scratch:
        cluster_path, jobs_path = Path(scratch, "cluster.yaml"), Path(scratch, "jobs.yaml")
        cluster_path.write_text(yaml.safe_dump(cluster_doc(nodes), sort_keys=False))
        jobs_path.write_text(yaml.safe_dump(jobs_doc(jobs), sort_keys=False))
        parsed_nodes = load_cluster(cluster_path)
        parsed_jobs = load_jobs(jobs_path)
    walls: list[float] = []
    cpus: list[float] = []
    digests: set[str] = set()
    placed = pending = 0
    for repeat in range(repeats + 1):
        gc.disable()
        wall, cpu = time.perf_counter(), time.process_time()
        spec = load_profile(None)
        state = ClusterState(parsed_nodes)
        core = Scheduler(state, spec)
        core.speed_table = load_speed_table(spec.speeds)
        actions = core.handle([JobSubmitted(j) for j in parsed_jobs], now=0.0)
        stranded = stranded_accelerators(state, profile_typicals(spec))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        gc.enable()
        digest = hashlib.sha256(repr(actions).encode())
        digest.update(json.dumps(stranded.to_dict(), sort_keys=True).encode())
        digests.add(digest.hexdigest()[:16])
        placed = sum(len(a.placements) for a in actions if isinstance(a, Bind))
        pending = sum(1 for a in actions if isinstance(a, Pending))
        if repeat:  # the first pass fills what a process builds once (the CEL parser)
            walls.append(wall)
            cpus.append(cpu)
        del actions, core, state
        gc.collect()
    return {
        "wall_s": statistics.median(walls),
        "cpu_s": statistics.median(cpus),
        "placed": placed,
        "pending": pending,
        "digest": ", ".join(sorted(digests)),
    }


def compare(args: argparse.Namespace) -> None:
    here = Path(__file__).resolve().parents[1] / "src"
    checkouts = [(str(args.compare_src), args.compare_src), ("this checkout", here)]
    argv = [sys.executable, __file__, "--jobs", str(args.jobs), "--nodes", str(args.nodes)]
    argv += ["--repeats", "1", "-o", "json"]
    runs: dict[str, list[dict[str, object]]] = {label: [] for label, _ in checkouts}
    for _ in range(args.repeats):
        for label, src in checkouts:
            env = dict(os.environ, PYTHONPATH=str(src))
            done = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
            runs[label].append(json.loads(done.stdout))
    print(
        f"load average {os.getloadavg()[0]:.1f}; {args.jobs:,} jobs on {args.nodes:,} nodes, "
        f"{args.repeats} runs each (medians)"
    )
    print("| checkout | wall ms | CPU ms | placed | pending | digest |")
    print("|---|---:|---:|---:|---:|---|")
    cpu: dict[str, float] = {}
    digests: set[str] = set()
    for label, _ in checkouts:
        rows = runs[label]
        cpu[label] = statistics.median(float(str(r["cpu_s"])) for r in rows)
        seen = {str(r["digest"]) for r in rows}
        digests |= seen
        wall = statistics.median(float(str(r["wall_s"])) for r in rows)
        print(
            f"| {label} | {wall * 1000:.0f} | {cpu[label] * 1000:.0f} | {rows[0]['placed']} | "
            f"{rows[0]['pending']} | {', '.join(sorted(seen))} |"
        )
    old, new = cpu[checkouts[0][0]], cpu["this checkout"]
    print(f"CPU time ratio this/other: {new / old:.2f}")
    same = "the same" if len(digests) == 1 else "DIFFERENT"
    print(f"actions: {same} in every run of both checkouts")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    parser.add_argument(
        "--compare-src",
        type=Path,
        help="also run the src/ directory of another checkout, alternating repeat by repeat",
    )
    args = parser.parse_args()
    if args.compare_src is not None:
        compare(args)
        return
    result = measure(args.jobs, args.nodes, args.repeats)
    if args.output == "json":
        print(json.dumps(result))
        return
    print(
        f"{args.jobs:,} jobs on {args.nodes:,} nodes, {args.repeats} repeats (medians): "
        f"wall {float(str(result['wall_s'])) * 1000:.0f} ms, "
        f"CPU {float(str(result['cpu_s'])) * 1000:.0f} ms; placed {result['placed']}, "
        f"pending {result['pending']}; actions digest {result['digest']}"
    )


if __name__ == "__main__":
    main()
