"""Arrays and dependencies at scale: what a 100,000-element array costs to submit, and what
a scheduling cycle costs with elements and held jobs that cannot run yet.

1. Submit: ``hetsched up`` as a subprocess on a temporary home (SQLite); one job with
   ``array: "0-99999%50"`` posted ``--repeats`` times (each a new array). Measured: the
   request (admission and the commit, client side), and submission to the loop having
   taken it (the array's first 50 elements created: 50 rows in ``hetsched job``).
   The core alone: ``Scheduler.handle`` of the one submission.
2. Cycle cost: the core on a cluster of 8 GPUs held by 8 running elements of an array
   whose cap is 8, behind which N elements wait to be created (N = 1,000 / 10,000 /
   100,000), plus N held jobs that wait for that array. One element ends per call and the
   next starts: the median time of such a call (events, the cycle, creating the next
   element) should not grow with N. For contrast, the same with N plain jobs waiting in
   the queue instead (they are eligible, so the queue holds them).

    .venv/bin/python bench/workflow_scale.py [--repeats 5] [--sizes 1000 10000 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import httpx

from hetsched.cluster import ClusterState
from hetsched.model.device import Device, Node
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.model.workflow import Dependency, parse_array
from hetsched.scheduler import Action, Bind, Event, JobSubmitted, Scheduler, TaskFinished
from hetsched.service.testing import free_port

CLUSTER = """
nodes:
  - name: bench-node
    cpu: "64"
    memory: 256Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 8}
"""

_REQUEST = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 1),))


def _server(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    cluster = home.parent / "cluster.yaml"
    cluster.write_text(CLUSTER)
    port = free_port()
    argv = [sys.executable, "-c", "from hetsched.cli.main import main; main()", "up"]
    argv += ["--home", str(home), "--port", str(port), "--cluster", str(cluster)]
    argv += ["--rate-limit", "0", "--node-name", "local"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def submit_times(repeats: int) -> tuple[list[float], list[float]]:
    """(request seconds, seconds until the first elements exist), per array."""
    base = Path(tempfile.mkdtemp(prefix="hetsched-wf-"))
    proc, url = _server(base / "home")
    requests: list[float] = []
    taken: list[float] = []
    try:
        token = (base / "home" / "admin.token").read_text().strip()
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client:
            for i in range(repeats):
                body = {
                    "name": f"sweep-{i}",
                    "command": ["sleep", "3600"],
                    "resources": {"cpu": "1", "memory": "1Gi"},
                    "array": "0-99999%50",
                }
                began = time.perf_counter()
                answer = client.post("/v1/jobs", json=body)
                requests.append(time.perf_counter() - began)
                assert answer.status_code == 201, answer.text
                job_id = answer.json()["id"]
                while True:
                    counts = client.get(f"/v1/jobs/{job_id}").json()["elements"]["counts"]
                    if sum(n for s, n in counts.items() if s != "not created yet") >= 50:
                        break
                    time.sleep(0.005)
                taken.append(time.perf_counter() - began)
                _cancel(client, job_id)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)
    return requests, taken


def _cancel(client: httpx.Client, job_id: str) -> None:
    """Cancel the array and wait until none of its elements runs (the server is stopped
    without stopping its tasks: none may be left behind)."""
    client.post(f"/v1/jobs/{job_id}/cancel")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        counts = client.get(f"/v1/jobs/{job_id}").json()["elements"]["counts"]
        if not counts.get("running") and not counts.get("pending"):
            return
        time.sleep(0.05)
    raise SystemExit(f"array {job_id}: its elements did not stop")


def _core() -> Scheduler:
    devices = tuple(Device(f"n/gpu{i}", "gpu", "nvidia", "A100") for i in range(8))
    return Scheduler(ClusterState([Node("n", 64_000, 256 * 1024, devices)]))


def core_submit(size: int) -> float:
    sched = _core()
    job = Job("x", _REQUEST, name="x", array=parse_array(f"0-{size - 1}%50"))
    began = time.perf_counter()
    sched.handle([JobSubmitted(job)], 0.0)
    return time.perf_counter() - began


def cycle_cost(n: int, plain: bool, steps: int = 200) -> float:
    """Median seconds of a call in which one running element ends and the next starts."""
    sched = _core()
    array = Job("x", _REQUEST, name="x", array=parse_array(f"0-{n + 8 + steps}%8"))
    events: list[Event] = [JobSubmitted(array)]
    if plain:  # two GPUs each: they wait for capacity, in the queue
        two = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 2),))
        events += [JobSubmitted(Job(f"p{i}", two, name=f"p{i}")) for i in range(n)]
    else:
        after = (Dependency("x"),)
        events += [
            JobSubmitted(Job(f"h{i}", _REQUEST, name=f"h{i}", after=after)) for i in range(n)
        ]
    running = deque(_bound(sched.handle(events, 0.0)))
    times: list[float] = []
    for step in range(steps):
        job_id, run = running.popleft()
        began = time.perf_counter()
        actions = sched.handle([TaskFinished(job_id, 0, run)], 1.0 + step)
        times.append(time.perf_counter() - began)
        running.extend(_bound(actions))
    return statistics.median(times)


def _bound(actions: list[Action]) -> list[tuple[str, int]]:
    return [(a.job_id, a.run) for a in actions if isinstance(a, Bind)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--no-service", action="store_true", help="the core measures only")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    if not args.no_service:
        requests, taken = submit_times(args.repeats)
        print(
            "submit 0-99999%50 through the API: request median "
            f"{statistics.median(requests) * 1e3:.1f} ms "
            f"(max {max(requests) * 1e3:.1f}), first 50 elements created after "
            f"{statistics.median(taken) * 1e3:.1f} ms (max {max(taken) * 1e3:.1f})"
        )
    core = [core_submit(100_000) for _ in range(args.repeats)]
    print(
        f"core: handle(submit 100,000-element array) median {statistics.median(core) * 1e3:.2f} ms"
    )
    for n in args.sizes:
        held = cycle_cost(n, plain=False)
        plain = cycle_cost(n, plain=True)
        print(
            f"N={n:>7,}: one element ends and the next starts: {held * 1e6:,.0f} us with N "
            f"elements not created and N held jobs; {plain * 1e6:,.0f} us with N plain jobs waiting"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
