"""`hetsched up` on a local 3-node Ray cluster against the local executor, side by side: jobs
started per second, and submit-to-start latency.

Everything runs in fresh network and PID namespaces (root, or where user namespaces allow
it): a local Ray cluster of 3 CPU nodes (`hetsched ray local`'s LocalCluster, 8 logical CPUs
each), then, for each trial, `hetsched up --executor ray` against it and `hetsched up` with
the local executor and the same 3 nodes (simulated, their tasks run as local processes),
one after the other, each on a fresh home.

- **jobs/s started**: one batch of N jobs (`POST /v1/jobs/batch`, 100m CPU each, so all fit
  at once), each a task that appends its own start time to a file and exits; the rate is N
  over the time from the batch's submission to the last task's start, as the tasks saw it.
- **submit-to-start latency**: jobs submitted one at a time with the cluster idle; from the
  job's `submitted_at` (its commit) to its task's own start time.

A task's start is the time its process wrote, not when the service recorded it: the Ray
executor's `start` returns before the process exists.

    .venv/bin/python bench/ray_vs_local.py                      # 40 jobs, 20 samples, 1 trial
    .venv/bin/python bench/ray_vs_local.py --jobs 60 --samples 30 --trials 2 -o json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from hetsched.ray.testing import namespace_unavailable, run_isolated

HETSCHED = str(Path(sys.executable).with_name("hetsched"))
NODES = 4
CPUS = 8


def _local_cluster(nodes: int) -> str:
    """The local executor's nodes: the same as the Ray cluster's, simulated (this machine is
    one more that takes nothing: it is cordoned by a label every job's selector excludes)."""
    return "\n".join(
        ["nodes:"]
        + [
            f'  - {{name: cpu-{i}, cpu: "{CPUS}", memory: 8Gi, labels: {{pool: bench}}}}'
            for i in range(nodes)
        ]
    )


TASK = 'echo "$HETSCHED_JOB_ID $(date +%s.%N)" >> "$STARTS"'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Service:
    def __init__(self, home: Path, args: list[str]) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [HETSCHED, "up", "--home", str(home), "--port", str(self.port), "--rate-limit", "0"]
        self.log = home.with_suffix(".log")
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [*argv, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 180
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"hetsched up exited:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(self.log.read_text()[-3000:])
            time.sleep(0.2)
        token = (home / "admin.token").read_text().strip()
        self.client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )

    def wait_done(self, ids: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = set(ids)
        while pending:
            if len(pending) <= 20:  # the list is paged: after a burst, ask each job
                rows = [self.client.get(f"/v1/jobs/{i}").json() for i in pending]
            else:
                rows = self.client.get("/v1/jobs", params={"all": "true"}).json()
            done = {r["id"] for r in rows if r["state"] in ("succeeded", "failed", "cancelled")}
            pending -= done
            if pending and time.monotonic() > deadline:
                states = [self.client.get(f"/v1/jobs/{i}").json() for i in sorted(pending)[:3]]
                raise TimeoutError(
                    f"{len(pending)} jobs not done in {timeout_s} s: {json.dumps(states)}\n"
                    f"the service's log ends:\n{self.log.read_text()[-4000:]}"
                )
            time.sleep(0.2)

    def close(self) -> None:
        self.client.close()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _job(name: str, starts: Path, local: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "resources": {"cpu": "100m", "memory": "64Mi"},
        "command": ["sh", "-c", TASK],
        "env": {"STARTS": str(starts)},
    }
    if local:
        body["resources"]["node_selector"] = {"pool": "bench"}
    return body


def _starts(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        job_id, _sep, at = line.partition(" ")
        out[job_id] = float(at)
    return out


def _cpu_s(processes: list[Any]) -> float:
    """CPU seconds (user and system) the processes have used so far."""
    import psutil

    total = 0.0
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def _agents() -> list[Any]:
    """The node agents' worker processes (Ray titles them after the actor class)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, TypeError):
            if "NodeAgent" in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
    return found


def _measure(service: _Service, work: Path, jobs: int, samples: int, local: bool) -> dict[str, Any]:
    import psutil

    starts = work / "starts.txt"
    bodies = [_job(f"burst-{i}", starts, local) for i in range(jobs)]
    control = [psutil.Process(service.process.pid)]
    agents = [] if local else _agents()
    cpu_before = (_cpu_s(control), _cpu_s(agents))
    began = time.time()
    answer = service.client.post("/v1/jobs/batch", json={"jobs": bodies})
    answer.raise_for_status()
    created = answer.json()["jobs"]
    ids = [j["id"] for j in created]
    submitted = min(float(j["submitted_at"]) for j in created)
    service.wait_done(ids, 600)
    done_s = time.time() - began
    agents = [] if local else _agents()  # the agents of nodes first used by this burst too
    cpu = (_cpu_s(control) - cpu_before[0], _cpu_s(agents) - cpu_before[1])
    seen = _starts(starts)
    missing = [i for i in ids if i not in seen]
    if missing:
        raise RuntimeError(f"{len(missing)} jobs never started")
    last = max(seen[i] for i in ids)
    latencies = []
    for i in range(samples):
        job = service.client.post("/v1/jobs", json=_job(f"one-{i}", starts, local)).json()
        service.wait_done([job["id"]], 120)
        latencies.append(_starts(starts)[job["id"]] - float(job["submitted_at"]))
    latencies.sort()
    return {
        "jobs": jobs,
        "jobs_per_s": round(jobs / (last - submitted), 2),
        "first_start_s": round(min(seen[i] for i in ids) - submitted, 3),
        "burst_wall_s": round(done_s, 2),
        "cp_cpu_ms_per_task": round(1000 * cpu[0] / jobs, 2),
        "agent_cpu_ms_per_task": round(1000 * cpu[1] / jobs, 2),
        "samples": samples,
        "latency_p50_ms": round(1000 * statistics.median(latencies), 1),
        # nearest rank
        "latency_p99_ms": round(1000 * latencies[math.ceil(0.99 * len(latencies)) - 1], 1),
        "latency_max_ms": round(1000 * latencies[-1], 1),
    }


def body(jobs: int, samples: int, trials: int, nodes_n: int = NODES) -> dict[str, Any]:
    """Inside the namespace: the cluster, then each trial's Ray and local runs."""
    from hetsched.ray.local import LocalCluster, LocalNodeSpec

    work = Path(tempfile.mkdtemp(prefix="hs-bench-"))
    (work / "cluster.yaml").write_text(_local_cluster(nodes_n) + "\n")
    nodes = [LocalNodeSpec(f"cpu-{i}", None, 0) for i in range(nodes_n)]
    cluster = LocalCluster(nodes, cpus=CPUS)
    cluster.start()
    runs: dict[str, list[dict[str, Any]]] = {"ray": [], "local": []}
    try:
        for trial in range(trials):
            for kind in ("ray", "local"):
                home = work / f"{kind}-{trial}"
                args = (
                    ["--executor", "ray", "--ray-address", cluster.address]
                    if kind == "ray"
                    else ["--cluster", str(work / "cluster.yaml")]
                )
                service = _Service(home, args)
                try:
                    out = home.parent / f"{kind}-{trial}-work"
                    out.mkdir()
                    runs[kind].append(_measure(service, out, jobs, samples, kind == "local"))
                finally:
                    service.close()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"runs": runs, "cpus": os.cpu_count(), "load": os.getloadavg(), "nodes": nodes_n}


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40, help="jobs in the burst")
    parser.add_argument("--samples", type=int, default=20, help="latency samples")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=NODES, help="raylets (and local nodes)")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    options = parser.parse_args()
    reason = namespace_unavailable()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 1
    load_before = os.getloadavg()[0]
    done = run_isolated(
        "ray_vs_local:body",
        {
            "jobs": options.jobs,
            "samples": options.samples,
            "trials": options.trials,
            "nodes_n": options.nodes,
        },
        3600,
        [str(Path(__file__).parent)],
    )
    if done.rc != 0:
        print(done.output, file=sys.stderr)
        return 1
    result = {**done.value, "load_before": load_before, "load_after": os.getloadavg()[0]}
    if options.output == "json":
        print(json.dumps(result, indent=2))
        return 0
    runs = result["runs"]
    print(f"load average {load_before:.1f} before, {result['load_after']:.1f} after")
    print(f"{result['nodes']} nodes, {options.jobs} jobs per burst")
    print(
        "| executor | jobs/s started | burst done | first start | latency p50 | p99 | max "
        "| CPU/task control plane | CPU/task agents |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in ("ray", "local"):
        print(
            f"| {kind} | {_median(runs[kind], 'jobs_per_s'):g} "
            f"| {_median(runs[kind], 'burst_wall_s'):g} s "
            f"| {_median(runs[kind], 'first_start_s'):g} s "
            f"| {_median(runs[kind], 'latency_p50_ms'):g} ms "
            f"| {_median(runs[kind], 'latency_p99_ms'):g} ms "
            f"| {_median(runs[kind], 'latency_max_ms'):g} ms "
            f"| {_median(runs[kind], 'cp_cpu_ms_per_task'):g} ms "
            f"| {_median(runs[kind], 'agent_cpu_ms_per_task'):g} ms |"
        )
    ratio = _median(runs["local"], "jobs_per_s") / _median(runs["ray"], "jobs_per_s")
    latency = _median(runs["ray"], "latency_p50_ms") / _median(runs["local"], "latency_p50_ms")
    print(f"local / ray jobs/s: {ratio:.1f}x; ray / local latency p50: {latency:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
