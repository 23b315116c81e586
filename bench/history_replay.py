"""Export and replay of a large service history, and whether the replay reproduces it.

    python bench/history_replay.py --nodes 1000 --jobs 10000
    python bench/history_replay.py --nodes 1000 --jobs 10000 --json

A history as ``hetsched up`` would have stored it, made by the simulator: a synthetic
Philly-like workload (as ``bench/sim_replay.py``) on a generated V100/P100/K80/A100 cluster
is simulated under the default profile, and every job, task run and node is written into a
fresh SQLite store (``store.migrate()``: the service's schema) the way the service writes
them. Then, timed: ``export_history`` (the store to the document), writing and reading the
JSON file, ``history_inputs`` and the replay under the recorded profile
(``replay_history``), and the reproduction. Prints the times, the file's size and the
reproduction's counts: a replay of a history made by the same core must place every job as
recorded and start them in the same order. The store's times are wall-clock (the run is
placed a second after now), so the replay sees each time with the rounding of a real
history's (about 0.2 microseconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from hetsched.controlplane.history import export_history, record_start
from hetsched.controlplane.storage.store import Store
from hetsched.controlplane.storage.tables import jobs, tasks
from hetsched.framework.profile import ProfileSpec
from hetsched.model.history import load_history
from hetsched.model.job import Job
from hetsched.model.quantity import format_cpu, format_memory
from hetsched.sim.engine import EngineConfig
from hetsched.sim.history import HistoryInputs, history_inputs
from hetsched.sim.history_replay import Watched, replay_history, reproduction
from hetsched.sim.philly import RuntimeDistribution
from hetsched.sim.replay import Policy
from hetsched.sim.synthetic import (
    SyntheticSpec,
    generate,
    gpus_per_node,
    rate_for_load,
    synthetic_cluster,
)
from hetsched.sim.workload import Workload

PHILLY = Path(__file__).resolve().parents[2] / "shared" / "traces" / "philly" / "philly_runtime.csv"


def _body(job: Job) -> dict[str, Any]:
    """The submission body of a generated job (what the service stores as the spec)."""
    request = job.resources
    resources: dict[str, Any] = {
        "cpu": format_cpu(request.cpu_milli),
        "memory": format_memory(request.memory_mib),
    }
    resources["devices"] = [
        {"class": c.device_class, "count": c.count, "share": c.share}
        | ({"selector": c.selector} if c.selector else {})
        for c in (d.primary for d in request.devices)
    ]
    body = {"name": job.id, "queue": job.queue, "priority": job.priority}
    body |= {"replicas": job.replicas, "resources": resources}
    return body | ({"gang": job.gang} if job.gang is not None else {})


def _workload(args: argparse.Namespace) -> tuple[list[Any], Workload]:
    nodes = synthetic_cluster(args.nodes, args.seed)
    durations = (
        RuntimeDistribution.from_file(PHILLY, args.max_duration)
        if PHILLY.is_file()
        else RuntimeDistribution(max_s=args.max_duration)
    )
    spec = SyntheticSpec(
        jobs=args.jobs,
        users=32,
        queues=4,
        durations=durations,
        gpus_per_node=max(gpus_per_node(nodes).values()),
        model_gpus_per_node=gpus_per_node(nodes),
        seed=args.seed,
    )
    spec = dataclasses.replace(spec, rate_per_h=rate_for_load(spec, nodes, args.load))
    return nodes, generate(spec)


def _record(store: Store, workload: Workload, watched: Watched, base: float) -> None:
    """Every job and its first run's tasks, as the service stores them (wall-clock times:
    virtual time plus ``base``)."""
    outcomes = {o.job_id: o for o in watched.replay.result.jobs}

    def wall(at: float | None) -> float | None:
        return None if at is None else base + at

    job_rows, task_rows = [], []
    for item in workload.jobs:
        job, outcome = item.job, outcomes[item.job.id]
        placed = watched.placed.get(job.id, ())
        start, end = wall(outcome.first_start), wall(outcome.end)
        job_rows.append(
            {
                "id": job.id, "owner": job.user, "queue": job.queue, "name": job.id,
                "priority": job.priority, "spec": _body(job), "state": outcome.state.value,
                "reason": "", "run": 0, "restarts": 0, "preemptions": outcome.preemptions,
                "cancel_requested": False, "submitted_at": base + job.submit_time,
                "started_at": start, "first_started_at": start, "ended_at": end,
                "exit_code": 0 if end is not None else None,
            }
        )  # fmt: skip
        request = job.resources
        for p in placed:
            devices = [{"id": d, "share": request.devices[0].primary.share} for d in p.devices]
            placement = {"node": p.node, "cpu_milli": request.cpu_milli}
            placement |= {"memory_mib": request.memory_mib, "devices": devices}
            task_rows.append(
                {
                    "job_id": job.id, "task": p.task, "run": 0, "node": p.node,
                    "placement": placement, "state": "exited", "bound_at": start,
                    "started_at": start, "ended_at": end, "exit_code": 0, "reason": "",
                }
            )  # fmt: skip
    with store.write() as conn:
        conn.execute(jobs.insert(), job_rows)
        if task_rows:
            conn.execute(tasks.insert(), task_rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--load", type=float, default=0.8, help="offered GPU load, 0..1")
    parser.add_argument("--max-duration", type=float, default=2 * 86400.0, help="seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON line instead of text")
    args = parser.parse_args(argv)

    nodes, workload = _workload(args)
    policy, config = Policy("default", ProfileSpec()), EngineConfig(tick_s=60.0)
    # what "happened": the same core on the same workload, recorded as the service would
    recorded = replay_history(HistoryInputs(nodes, workload, [], []), policy, args.seed, config)
    with tempfile.TemporaryDirectory() as folder:
        store = Store(f"sqlite:///{Path(folder) / 'hetsched.db'}")
        store.migrate()
        record_start(store, nodes, ProfileSpec(), args.seed)  # the nodes join now
        _record(store, workload, recorded, time.time() + 1.0)
        times: dict[str, float] = {}
        started = time.perf_counter()
        document = export_history(store)
        times["export_s"] = time.perf_counter() - started
        store.close()
        path = Path(folder) / "history.json"
        started = time.perf_counter()
        path.write_text(json.dumps(document.model_dump(mode="json")), encoding="utf-8")
        loaded = load_history(path)
        times["write_read_s"] = time.perf_counter() - started
        size_mib = path.stat().st_size / 2**20
    started = time.perf_counter()
    inputs = history_inputs(loaded)
    watched = replay_history(inputs, policy, loaded.seed, config)
    times["replay_s"] = time.perf_counter() - started
    started = time.perf_counter()
    result = reproduction(loaded, inputs, watched)
    times["reproduction_s"] = time.perf_counter() - started
    row: dict[str, Any] = {"nodes": args.nodes, "jobs": args.jobs, "load": args.load}
    row |= {k: round(v, 2) for k, v in times.items()} | {"file_mib": round(size_mib, 1)}
    row |= {"reproduced": result["reproduced"], "placements": result["placements"]}
    row["start_order_same"] = result["start_order"]["same"]
    row["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    row["python"] = platform.python_version()
    if args.json:
        print(json.dumps(row))
    else:
        for key, value in row.items():
            print(f"{key:>16}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
