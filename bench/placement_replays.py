"""Does fgdplus beat the default placement on the synthetic replays? (It decides the defaults.)

    .venv/bin/python bench/placement_replays.py
    .venv/bin/python bench/placement_replays.py --cluster examples/clusters/mixed.yaml \
        --workloads examples/workloads/synthetic-contended.csv

For each workload, replays it (``hetsched sim replay``'s engine, with departures) under the
default profile (examples/profiles/default.yaml) and under the same profile with its scores
replaced by ``fgd`` and by ``fgdplus`` alone. Their target workload is learned the way a
service would learn it, from the submissions (:class:`hetsched.cluster.target.ShapeHistory`),
here from the whole workload: the best a history window could know. Prints wait, JCT,
makespan and utilization side by side. Results are not tests.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hetsched.cluster.target import ShapeHistory
from hetsched.framework.profile import ProfileSpec, load_profile
from hetsched.model.specs import load_cluster
from hetsched.sim.replay import Policy, replay
from hetsched.sim.workload import Workload, read_workload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
WORKLOADS = ",".join(
    str(EXAMPLES / "workloads" / f"synthetic-{n}.csv") for n in ("small", "contended")
)


def learned_target(workload: Workload) -> list[dict[str, Any]]:
    """The target classes a service would learn from all of ``workload``'s submissions."""
    history = ShapeHistory(window_s=None)
    last = 0.0
    for item in workload.jobs:
        last = max(last, item.job.submit_time)
        history.observe(item.job.resources, last, item.job.replicas)
    target = history.target(last)
    assert target is not None, "an empty workload"
    return [
        {
            "cpu_milli": c.cpu_milli,
            "count": c.count,
            "share": c.share,
            "selector": c.selector,
            "weight": c.weight,
        }
        for c in target.classes
    ]


def with_score(profile: ProfileSpec, name: str, target: list[dict[str, Any]]) -> Policy:
    data = profile.model_dump()
    data["name"] = name
    data["score"] = [{"name": name, "weight": 1.0, "args": {"target": target}}]
    return Policy(name, ProfileSpec.model_validate(data))


def row(label: str, summary: dict[str, Any]) -> str:
    util = ", ".join(f"{k} {100 * v:.1f}" for k, v in summary["utilization"].items() if v)
    return (
        f"| {label} | {summary['wait_s']['mean'] / 60:.1f} min | "
        f"{summary['wait_s']['p99'] / 3600:.2f} h | {summary['jct_s']['mean'] / 3600:.2f} h | "
        f"{summary['makespan_s'] / 3600:.2f} h | {util} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", type=Path, default=EXAMPLES / "clusters" / "mixed.yaml")
    parser.add_argument("--workloads", default=WORKLOADS, help="comma-separated CSV files")
    parser.add_argument("--profile", type=Path, default=EXAMPLES / "profiles" / "default.yaml")
    args = parser.parse_args()
    nodes = load_cluster(args.cluster)
    default = load_profile(args.profile)
    for path in args.workloads.split(","):
        workload = read_workload(path)
        target = learned_target(workload)
        print(
            f"\n{Path(path).name} on {args.cluster.name}: {len(workload)} jobs, "
            f"{len(target)} target classes learned"
        )
        print("| profile | wait mean | wait p99 | JCT mean | makespan | utilization % |")
        print("|---|---:|---:|---:|---:|---|")
        policies = [Policy("default", default)]
        policies += [with_score(default, name, target) for name in ("fgd", "fgdplus")]
        for policy in policies:
            result = replay(nodes, workload, policy)
            print(row(policy.name, result.to_dict(jobs=False)["summary"]), flush=True)


if __name__ == "__main__":
    main()
