"""How long until Ray declares a crashed raylet dead, and until `hetsched up --executor ray`'s
node inventory reports the node removed (its jobs requeue in the next turn; docs/ray.md).

Starts a local cluster of CPU nodes in its own network and PID namespaces (root, or where
user namespaces allow it), SIGKILLs one raylet after another and times each until Ray's node
table says the node is dead and until the inventory says NodeRemoved, with `hetsched ray
local`'s fast health checks and with Ray's defaults.

    .venv/bin/python bench/ray_node_death.py                 # 2 trials of each
    .venv/bin/python bench/ray_node_death.py --trials 3 -o json
    .venv/bin/python bench/ray_node_death.py --trials 3 --checks fast
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


def measure(trials: int, fast: bool) -> dict[str, list[float]]:
    """Inside the namespace: seconds from SIGKILL of each raylet to Ray calling it dead
    (``dead``), and to the node inventory, polling Ray's node table every second as in
    ``hetsched up --executor ray``, reporting ``NodeRemoved`` (``removed``: the core
    requeues or fails the node's jobs in the turn that takes it)."""
    import threading

    from hetsched.ray import _api
    from hetsched.ray.inventory import RayInventory
    from hetsched.ray.local import LocalCluster, LocalNodeSpec
    from hetsched.scheduler.events import Event, NodeRemoved

    nodes = [LocalNodeSpec(f"cpu-{i}", None, 0) for i in range(trials)]
    cluster = LocalCluster(nodes, fast_health_checks=fast, cpus=1)
    cluster.start()
    out: dict[str, list[float]] = {"dead": [], "removed": []}
    removed: dict[str, float] = {}
    seen = threading.Condition()

    def sink(events: list[Event]) -> None:
        with seen:
            for event in events:
                if isinstance(event, NodeRemoved):
                    removed[event.name] = time.monotonic()
            seen.notify_all()

    inventory = RayInventory()
    try:
        _api.connect(cluster.address)
        inventory.initial(timeout_s=60)
        inventory.start(sink)
        for spec in nodes:
            kill_raylet(ClusterInfo(cluster.address, {}, cluster.pids(), "", ""), spec.name)
            began = time.monotonic()
            while time.monotonic() - began < 300:
                alive = {n["Labels"].get("hetsched.io/node"): n["Alive"] for n in _api.nodes()}
                if not alive.get(spec.name, True):
                    break
                time.sleep(0.1)
            out["dead"].append(round(time.monotonic() - began, 1))
            with seen:
                seen.wait_for(lambda name=spec.name: name in removed, timeout=30)
            out["removed"].append(round(removed.get(spec.name, float("nan")) - began, 1))
    finally:
        inventory.stop()
        cluster.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    parser.add_argument(
        "--checks",
        choices=["both", "fast", "defaults"],
        default="both",
        help="the health checks to measure: hetsched ray local's, Ray's defaults, or both",
    )
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
        if options.checks != "both" and fast != (options.checks == "fast"):
            continue
        done = run_isolated(
            "ray_node_death:measure",
            {"trials": options.trials, "fast": fast},
            600,
            [str(Path(__file__).parent)],
        )
        if done.rc != 0:
            print(done.output, file=sys.stderr)
            return 1
        results[name] = {
            what: {"seconds": values, "median": statistics.median(values)}
            for what, values in done.value.items()
        }
    if options.output == "json":
        print(json.dumps(results, indent=2))
    else:
        for name, result in results.items():
            for what, found in result.items():
                print(f"{name}, {what}: median {found['median']} s, trials {found['seconds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
