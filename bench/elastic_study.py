"""Elastic against rigid jobs, and heterogeneous jobs against the two-job workaround, in the
simulator (docs/elastic.md has the tables).

Study 1, elastic vs rigid: a Philly-like stream (Poisson arrivals; tasks of one GPU, jobs
of 1, 2, 4 or 8 of them with weights .5/.2/.2/.1; lognormal durations, median 20 min, at
most 8 h; a fifth of the jobs at a higher priority, with priority preemption on) on 8 nodes
of 8 A100. Rigid jobs ask for all their GPUs at once; elastic jobs of 2 or more ask for at
least a quarter of them (``min_replicas``), with a 30 s checkpoint notice. The same stream,
seed and profile for both; an unsaturated load (offered GPU-time 50 % of capacity) and a
saturated one (120 %). A run's rate is linear in its count (``hetsched.sim.work``).

Study 2, heterogeneous vs two jobs: pairs of a driver (16 CPUs) and 4 GPU workers (1 GPU and
2 CPUs each) on 4 nodes of 8 GPUs and 24 CPUs, beside CPU jobs of 8 CPUs. As one job with
``groups`` the pair is placed whole; as the workaround, a driver job and a workers job are
submitted together and placed apart. Stranded GPU-time is what a workers job held while
its driver was not running. A deadlock is a moment at which the CPUs held by workers whose
driver has not started leave no node with room for a driver: from there, with workers that
wait for their driver, none of those drivers could ever start. The simulator lets a workers
job run on without its driver (it ends and frees its CPUs), so the workaround's figures are
a lower bound.

    .venv/bin/python bench/elastic_study.py            # both studies, about a minute
    .venv/bin/python bench/elastic_study.py --jobs 200 --seed 3
    .venv/bin/python bench/elastic_study.py --only hetero --worker-cpu 3
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from hetsched.framework.profile import parse_profile
from hetsched.model.checkpoint import Checkpointing
from hetsched.model.device import Device, Node
from hetsched.model.job import DeviceRequest, Job, TaskGroup, TaskRequest
from hetsched.scheduler import Action, Bind, Scheduler
from hetsched.sim.engine.run import EngineConfig
from hetsched.sim.replay import Policy, Replay, replay
from hetsched.sim.workload import Workload, WorkloadJob

NOTICE = Checkpointing(None, 30.0, "SIGUSR1", 0.0)
GPU = DeviceRequest.of("gpu", 1)
PROFILE = {
    "queue_sort": "priority",
    "post_filter": [{"name": "preemption", "args": {"grace_s": 30, "min_runtime_s": 300}}],
}


def _nodes(count: int, gpus: int, cpu: int) -> list[Node]:
    return [
        Node(
            f"n{i}",
            cpu,
            512 * 1024,
            tuple(Device(f"n{i}/gpu{g}", "gpu", "nvidia", "A100") for g in range(gpus)),
        )
        for i in range(count)
    ]


def _stream(jobs: int, load: float, seed: int, capacity: int) -> list[tuple[float, int, float]]:
    """(submit time, GPUs, duration) per job, for an offered load of ``load`` x capacity."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2, 4, 8], size=jobs, p=[0.5, 0.2, 0.2, 0.1])
    duration = np.minimum(rng.lognormal(np.log(1200.0), 1.0, size=jobs), 8 * 3600.0)
    rate = load * capacity / float(np.mean(gpus * duration))  # jobs per second
    submit = np.cumsum(rng.exponential(1.0 / rate, size=jobs))
    return [(float(s), int(g), float(d)) for s, g, d in zip(submit, gpus, duration, strict=True)]


def elastic_vs_rigid(jobs: int, load: float, seed: int, elastic: bool) -> Replay:
    stream = _stream(jobs, load, seed, 64)
    rng = np.random.default_rng(seed + 1)
    high = rng.random(jobs) < 0.2
    items = []
    for i, (submit, gpus, duration) in enumerate(stream):
        least = max(1, gpus // 4) if elastic and gpus > 1 else None
        job = Job(
            f"j{i}",
            TaskRequest(1000, 4096, (GPU,)),
            replicas=gpus,
            min_replicas=least,
            priority=int(high[i]),
            submit_time=submit,
            checkpoint=NOTICE,
        )
        items.append(WorkloadJob(job, duration))
    name = "elastic" if elastic else "rigid"
    policy = Policy(name, parse_profile(PROFILE))
    return replay(_nodes(8, 8, 128_000), Workload(tuple(items)), policy, seed, EngineConfig())


def _pairs(pairs: int, seed: int, hetero: bool, worker_cpu: int = 2) -> list[WorkloadJob]:
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.exponential(600.0, size=pairs))
    duration = rng.uniform(1800.0, 5400.0, size=pairs)
    others = rng.uniform(600.0, 3600.0, size=pairs)
    driver = TaskRequest(16_000, 8192)
    worker = TaskRequest(worker_cpu * 1000, 8192, (GPU,))
    background = TaskRequest(8000, 8192)
    items: list[WorkloadJob] = []
    for i in range(pairs):
        at, d = float(submit[i]), float(duration[i])
        items.append(WorkloadJob(Job(f"cpu{i}", background, submit_time=at), float(others[i])))
        if hetero:
            groups = (TaskGroup("driver", 1, driver), TaskGroup("workers", 4, worker))
            job = Job(f"p{i}", driver, replicas=5, groups=groups, submit_time=at)
            items.append(WorkloadJob(job, d))
        else:
            items.append(WorkloadJob(Job(f"p{i}-driver", driver, submit_time=at), d))
            workers = Job(f"p{i}-workers", worker, replicas=4, submit_time=at)
            items.append(WorkloadJob(workers, d))
    return items


class _Watched(Scheduler):
    """The core, with every Bind it gives noted (virtual time, action)."""

    binds: list[tuple[float, Bind]]

    def handle(self, events: Any, now: float) -> list[Action]:
        actions = super().handle(events, now)
        self.binds.extend((now, a) for a in actions if isinstance(a, Bind))
        return actions


def _deadlocks(
    binds: list[tuple[float, Bind]], out: dict[str, Any], pairs: int
) -> tuple[list[float], int | None]:
    """The moments (virtual s) at which the CPUs of workers whose driver has not started
    leave no node 16 free CPUs (of 24) for a driver: a deadlock once workers wait; and the
    least room (millicores) those workers ever left for a driver on the roomiest node."""
    workers = {b.job_id[: -len("-workers")]: b for _, b in binds if b.job_id.endswith("-workers")}
    times = sorted({t for t, _ in binds} | {o.end for o in out.values() if o.end is not None})
    found, least = [], None
    for t in times:
        held: dict[str, int] = {f"n{i}": 0 for i in range(4)}
        for i in range(pairs):
            w, d, bind = out[f"p{i}-workers"], out[f"p{i}-driver"], workers.get(f"p{i}")
            start = d.first_start if d.first_start is not None else float("inf")
            if bind is None or w.first_start is None or not w.first_start <= t < start:
                continue
            if w.end is not None and w.end <= t:
                continue
            for _, placement in bind.placements:
                held[placement.node] += placement.cpu_milli
        if not any(held.values()):
            continue
        room = 24_000 - min(held.values())
        least = room if least is None else min(least, room)
        if room < 16_000:
            found.append(t)
    return found, least


def hetero_vs_two_jobs(pairs: int, seed: int, hetero: bool, worker_cpu: int = 2) -> dict[str, Any]:
    items = _pairs(pairs, seed, hetero, worker_cpu)
    # a queue order that lets later jobs pass one that waits (as Kubernetes and Slurm's
    # backfill do); strict FIFO would hold the workers job behind its driver
    policy = Policy("hetero" if hetero else "two-jobs", parse_profile({"queue_sort": "priority"}))
    binds: list[tuple[float, Bind]] = []

    def core(state: Any, profile: Any, seed: int) -> Scheduler:
        watched = _Watched(state, profile, seed)
        watched.binds = binds
        return watched

    nodes = _nodes(4, 8, 24_000)
    done = replay(nodes, Workload(tuple(items)), policy, seed, EngineConfig(), core=core)
    out = {o.job_id: o for o in done.result.jobs}
    deadlocks, room = ([], None) if hetero else _deadlocks(binds, out, pairs)
    jct, stranded, exposed = [], 0.0, 0
    for i in range(pairs):
        if hetero:
            o = out[f"p{i}"]
            if o.end is not None:
                jct.append(o.end - o.submit)
            continue
        d, w = out[f"p{i}-driver"], out[f"p{i}-workers"]
        if d.end is None or w.end is None or d.first_start is None or w.first_start is None:
            continue
        jct.append(max(d.end, w.end) - d.submit)
        alone = max(0.0, min(d.first_start, w.end) - w.first_start)
        alone += max(0.0, w.end - max(d.end, w.first_start))
        stranded += 4 * alone
        exposed += alone > 0
    return {
        "policy": policy.name,
        "pairs": pairs,
        "worker_cpu": worker_cpu,
        "mean_pair_jct_h": round(float(np.mean(jct)) / 3600, 3),
        "stranded_gpu_h": round(stranded / 3600, 2),
        "pairs_with_stranded_workers": exposed,
        "deadlock_moments": len(deadlocks),
        "first_deadlock_h": round(deadlocks[0] / 3600, 2) if deadlocks else None,
        "least_driver_room_cpu": None if room is None else room / 1000,
        "gpu_utilization": round(done.summary.utilization.get("A100", 0.0), 3),
    }


def _row(result: Replay, load: float) -> dict[str, Any]:
    s = result.summary
    return {
        "policy": result.policy,
        "load": load,
        "jobs": s.jobs,
        "mean_jct_h": round(s.jct["mean"] / 3600, 3),
        "p99_jct_h": round(s.jct["p99"] / 3600, 3),
        "makespan_h": round(s.makespan_s / 3600, 2),
        "gpu_utilization": round(s.utilization.get("A100", 0.0), 3),
        "preemptions": s.preemptions,
        "resizes": s.migrations,
        "lost_work_h": round(s.lost_work_s / 3600, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--pairs", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker-cpu", type=int, default=2, help="CPUs per GPU worker")
    parser.add_argument("--only", choices=["elastic", "hetero"], help="run one study")
    args = parser.parse_args()
    for load in (0.5, 1.2) if args.only != "hetero" else ():
        for elastic in (False, True):
            result = elastic_vs_rigid(args.jobs, load, args.seed, elastic)
            print(json.dumps(_row(result, load)))
    for hetero in (False, True) if args.only != "elastic" else ():
        print(json.dumps(hetero_vs_two_jobs(args.pairs, args.seed, hetero, args.worker_cpu)))


if __name__ == "__main__":
    main()
