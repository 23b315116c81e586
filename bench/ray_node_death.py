"""How long until Ray declares a crashed raylet dead: what bounds the Ray inventory's
detection of a lost node (docs/ray.md).

Starts a local cluster of CPU nodes in its own network and PID namespaces (root, or where
user namespaces allow it), SIGKILLs one raylet after another and times each until Ray's node
table says the node is dead, with `hetsched ray local`'s fast health checks and with Ray's
defaults.

    .venv/bin/python bench/ray_node_death.py                 # 2 trials of each
    .venv/bin/python bench/ray_node_death.py --trials 3 -o json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from hetsched.ray.testing import ClusterInfo, kill_raylet, namespace_unavailable, run_isolated


def measure(trials: int, fast: bool) -> list[float]:
    """Inside the namespace: seconds from SIGKILL of each raylet to Ray calling it dead."""
    from hetsched.ray import _api
    from hetsched.ray.local import LocalCluster, LocalNodeSpec

    nodes = [LocalNodeSpec(f"cpu-{i}", None, 0) for i in range(trials)]
    cluster = LocalCluster(nodes, fast_health_checks=fast, cpus=1)
    cluster.start()
    out = []
    try:
        _api.connect(cluster.address)
        for spec in nodes:
            kill_raylet(ClusterInfo(cluster.address, {}, cluster.pids(), "", ""), spec.name)
            began = time.monotonic()
            while time.monotonic() - began < 300:
                alive = {n["Labels"].get("hetsched.io/node"): n["Alive"] for n in _api.nodes()}
                if not alive.get(spec.name, True):
                    break
                time.sleep(0.1)
            out.append(round(time.monotonic() - began, 1))
    finally:
        cluster.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    options = parser.parse_args()
    reason = namespace_unavailable()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 1
    results: dict[str, Any] = {}
    for name, fast in (
        ("hetsched ray local (1 s checks, 3 failures)", True),
        ("Ray defaults", False),
    ):
        done = run_isolated(
            "ray_node_death:measure",
            {"trials": options.trials, "fast": fast},
            600,
            [str(Path(__file__).parent)],
        )
        if done.rc != 0:
            print(done.output, file=sys.stderr)
            return 1
        results[name] = {"seconds": done.value, "median": statistics.median(done.value)}
    if options.output == "json":
        print(json.dumps(results, indent=2))
    else:
        for name, result in results.items():
            print(f"{name}: median {result['median']} s, trials {result['seconds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
