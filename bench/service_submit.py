"""Service benchmarks: accepted submissions per second, and submit-to-start latency.

Starts ``hetsched up`` as a subprocess on a temporary home (SQLite) and a free loopback port.

1. Throughput: client processes x threads submit jobs as fast as they can; every submission
   carries an idempotency key and is committed before its 2xx. The jobs wait behind one
   running job that holds the cluster's only GPU, so the benchmark measures the API, the
   store and the loop, not the cost of spawning thousands of processes on this machine.
2. Latency: with capacity free, jobs are submitted one at a time; the latency is from the
   commit of the submission to the start of the task's process (store timestamps).

    .venv/bin/python bench/service_submit.py [--jobs 5000] [--clients 4] [--threads 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

from hetsched.service.testing import free_port

CLUSTER = """
nodes:
  - name: bench-node
    cpu: "64"
    memory: 256Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 1}
"""


def start_server(home: Path, sync: str) -> tuple[subprocess.Popen[bytes], str]:
    cluster = home.parent / "cluster.yaml"
    cluster.write_text(CLUSTER)
    port = free_port()
    argv = [sys.executable, "-c", "from hetsched.cli.main import main; main()", "up"]
    argv += ["--home", str(home), "--port", str(port), "--cluster", str(cluster)]
    argv += ["--rate-limit", "0", "--sync", sync]
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


def _client_process(url: str, token: str, jobs: int, threads: int, out: object) -> None:
    body = {
        "name": "bench",
        "command": ["true"],
        "resources": {"cpu": "100m", "memory": "64Mi", "devices": [{"class": "gpu"}]},
    }
    per_thread = jobs // threads
    errors = [0]

    def work() -> None:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client:
            for _ in range(per_thread):
                answer = client.post(
                    "/v1/jobs", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}
                )
                if answer.status_code != 201:
                    errors[0] += 1

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out.put((per_thread * threads, errors[0]))  # type: ignore[attr-defined]


def throughput(jobs: int, clients: int, threads: int, sync: str) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="hetsched-bench-")) / "home"
    proc, url = start_server(home, sync)
    try:
        token = (home / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        hog = {
            "name": "hog",
            "command": ["sleep", "3600"],
            "resources": {"cpu": "1", "memory": "64Mi", "devices": [{"class": "gpu"}]},
        }
        hog_id = httpx.post(f"{url}/v1/jobs", json=hog, headers=headers).json()["id"]
        queue: multiprocessing.Queue[tuple[int, int]] = multiprocessing.Queue()
        procs = [
            multiprocessing.Process(
                target=_client_process, args=(url, token, jobs // clients, threads, queue)
            )
            for _ in range(clients)
        ]
        started = time.perf_counter()
        for p in procs:
            p.start()
        results = [queue.get() for _ in procs]
        elapsed = time.perf_counter() - started
        for p in procs:
            p.join()
        sent = sum(r[0] for r in results)
        errors = sum(r[1] for r in results)
        stored = len(
            httpx.get(
                f"{url}/v1/jobs", params={"all": True, "limit": 100000}, headers=headers, timeout=60
            ).json()
        )
        httpx.post(f"{url}/v1/jobs/{hog_id}/cancel", headers=headers)
        return {
            "sent": sent,
            "errors": errors,
            "stored": stored - 1,
            "seconds": elapsed,
            "per_second": (sent - errors) / elapsed,
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(home.parent, ignore_errors=True)


def latency(samples: int, sync: str) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="hetsched-bench-")) / "home"
    proc, url = start_server(home, sync)
    try:
        token = (home / "admin.token").read_text().strip()
        body = {"name": "lat", "command": ["true"], "resources": {"cpu": "100m", "memory": "64Mi"}}
        values: list[float] = []
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client:
            ids = []
            for _ in range(samples):
                ids.append(client.post("/v1/jobs", json=body).json()["id"])
                time.sleep(0.05)
            deadline = time.monotonic() + 120
            for job_id in ids:
                while True:
                    job = client.get(f"/v1/jobs/{job_id}").json()
                    tasks = job.get("tasks", [])
                    if tasks and tasks[0]["started_at"]:
                        values.append(tasks[0]["started_at"] - job["submitted_at"])
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"job {job_id} did not start")
                    time.sleep(0.05)
        values.sort()
        return {
            "samples": len(values),
            "p50_ms": 1000 * statistics.median(values),
            "p99_ms": 1000 * values[min(len(values) - 1, int(0.99 * len(values)))],
            "max_ms": 1000 * values[-1],
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(home.parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--sync", choices=["FULL", "NORMAL", "both"], default="both")
    args = parser.parse_args()
    modes = ["FULL", "NORMAL"] if args.sync == "both" else [args.sync]
    print("| SQLite synchronous | clients x threads | jobs | accepted/s | errors | stored |")
    print("|---|---|---|---|---|---|")
    for sync in modes:
        r = throughput(args.jobs, args.clients, args.threads, sync)
        print(
            f"| {sync} | {args.clients} x {args.threads} | {r['sent']:.0f} | "
            f"{r['per_second']:.0f} | {r['errors']:.0f} | {r['stored']:.0f} |"
        )
    print()
    print("| SQLite synchronous | samples | submit-to-start p50 | p99 | max |")
    print("|---|---|---|---|---|")
    for sync in modes:
        r = latency(args.samples, sync)
        print(
            f"| {sync} | {r['samples']:.0f} | {r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms | "
            f"{r['max_ms']:.1f} ms |"
        )


if __name__ == "__main__":
    main()
