"""Service benchmarks: accepted submissions per second (single and batch), submit-to-start
latency, and what a hostile selector costs.

Starts ``hetsched up`` as a subprocess on a temporary home (SQLite) and a free loopback port.

1. Throughput, single: client processes x threads submit jobs as fast as they can; every
   submission carries an idempotency key and is committed before its 2xx. The jobs wait
   behind one running job that holds the cluster's only GPU, so the benchmark measures the
   API, the store and the loop, not the cost of spawning thousands of processes here.
2. Throughput, batch: the same jobs in batches (``POST /v1/jobs/batch``), one client posting
   one batch after another; accepted/s is jobs over the wall time of the batch requests.
3. Latency: with capacity free, jobs are submitted one at a time; the latency is from the
   submission's admission to the start of the task's process (store timestamps), split into
   the way to the loop and the turn (``bench/service_latency.py``, which also has
   ``--phases`` and ``--compare-src``).
4. Hostile selectors: the time to refuse a selector of three nested comprehensions over
   30-element lists (27,000 bodies; it took 11.6 s before selectors were bounded), and the
   median of ``GET /v1/jobs`` alone and while 8 clients send such selectors.

Every throughput row also gives the server's CPU time per accepted job (user + system of the
``hetsched up`` process): on a shared machine wall time measures the other load too.

    .venv/bin/python bench/service_submit.py [--jobs 5000] [--clients 4] [--threads 8]
    .venv/bin/python bench/service_submit.py --only batch,hostile --batch-size 1000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
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
from typing import Any

import httpx
import psutil

import service_latency
from hetsched.service.testing import free_port
from service_latency import print_latency

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
        before_cpu = _cpu_s(proc)
        started = time.perf_counter()
        for p in procs:
            p.start()
        results = [queue.get() for _ in procs]
        elapsed = time.perf_counter() - started
        cpu = _cpu_s(proc) - before_cpu
        for p in procs:
            p.join()
        sent = sum(r[0] for r in results)
        errors = sum(r[1] for r in results)
        stored = count_jobs(url, headers)
        _cancel_and_wait(url, headers, hog_id)
        return {
            "sent": sent,
            "errors": errors,
            "stored": stored - 1,
            "seconds": elapsed,
            "per_second": (sent - errors) / elapsed,
            "cpu_ms_per_job": 1000 * cpu / max(sent - errors, 1),
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(home.parent, ignore_errors=True)


def count_jobs(url: str, headers: dict[str, str]) -> int:
    """Every job the service holds, counted through the pages of ``GET /v1/jobs``."""
    count, cursor = 0, None
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        while True:
            params: dict[str, Any] = {"all": True, "limit": 10_000}
            if cursor is not None:
                params["cursor"] = cursor
            answer = client.get("/v1/jobs", params=params)
            answer.raise_for_status()
            count += len(answer.json())
            cursor = answer.headers.get("X-Next-Cursor")
            if cursor is None:
                return count


def _cancel_and_wait(url: str, headers: dict[str, str], job_id: str) -> None:
    """Cancel the job and wait until it has ended: a service stopped gracefully leaves its
    tasks running (for the next start to adopt), and this one will not start again."""
    httpx.post(f"{url}/v1/jobs/{job_id}/cancel", headers=headers)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers).json()["state"]
        if state in {"cancelled", "failed", "succeeded"}:
            return
        time.sleep(0.1)


def _cpu_s(proc: subprocess.Popen[bytes]) -> float:
    times = psutil.Process(proc.pid).cpu_times()
    return float(times.user + times.system)


_BODY = {
    "name": "bench",
    "command": ["true"],
    "resources": {"cpu": "100m", "memory": "64Mi", "devices": [{"class": "gpu"}]},
}
_HOG = {
    "name": "hog",
    "command": ["sleep", "3600"],
    "resources": {"cpu": "1", "memory": "64Mi", "devices": [{"class": "gpu"}]},
}


def batch_throughput(jobs: int, batch_size: int, sync: str) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="hetsched-bench-")) / "home"
    proc, url = start_server(home, sync)
    try:
        token = (home / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        hog_id = httpx.post(f"{url}/v1/jobs", json=_HOG, headers=headers).json()["id"]
        rates: list[float] = []
        accepted, errors, busy, cpu = 0, 0, 0.0, 0.0
        with httpx.Client(base_url=url, headers=headers, timeout=300) as client:
            for _ in range(max(1, jobs // batch_size)):
                before_cpu = _cpu_s(proc)
                started = time.perf_counter()
                answer = client.post(
                    "/v1/jobs/batch",
                    json={"jobs": [_BODY] * batch_size},
                    headers={"Idempotency-Key": uuid.uuid4().hex},
                )
                took = time.perf_counter() - started
                cpu += _cpu_s(proc) - before_cpu
                if answer.status_code != 201:
                    errors += batch_size
                    continue
                accepted += batch_size
                busy += took
                rates.append(batch_size / took)
        stored = count_jobs(url, headers)
        _cancel_and_wait(url, headers, hog_id)
        return {
            "accepted": accepted,
            "errors": errors,
            "stored": stored - 1,
            "per_second": accepted / busy if busy else 0.0,
            "median_batch_per_second": statistics.median(rates) if rates else 0.0,
            "cpu_ms_per_job": 1000 * cpu / max(accepted, 1),
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(home.parent, ignore_errors=True)


_LIST30 = "[" + ",".join(str(i) for i in range(30)) + "]"
THREE_MAPS = f"{_LIST30}.map(a, {_LIST30}.map(b, {_LIST30}.map(c, a + b + c))).size() > 0"


def hostile(samples: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="hetsched-bench-")) / "home"
    proc, url = start_server(home, "NORMAL")
    hostile_body = {
        "name": "costly",
        "command": ["true"],
        "resources": {"devices": [{"class": "gpu", "selector": THREE_MAPS}]},
    }
    try:
        token = (home / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
            # one uncounted request first: the server's first answer pays for warming up
            _refusal_s(client, hostile_body, THREE_MAPS + " || true")
            # each selector distinct (a refusal is remembered: the same one again is cheaper)
            distinct = [
                _refusal_s(client, hostile_body, THREE_MAPS + f" || {i} > 0")
                for i in range(samples)
            ]
            again = [_refusal_s(client, hostile_body, THREE_MAPS) for _ in range(samples)]
            alone = _get_jobs_ms(client, samples)
        stop = threading.Event()

        def attack() -> None:
            with httpx.Client(base_url=url, headers=headers, timeout=120) as attacker:
                while not stop.is_set():
                    attacker.post("/v1/jobs", json=hostile_body)

        attackers = [threading.Thread(target=attack) for _ in range(8)]
        for t in attackers:
            t.start()
        try:
            with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
                under = _get_jobs_ms(client, samples)
        finally:
            stop.set()
            for t in attackers:
                t.join()
        return {
            "samples": samples,
            "refusal_p50_ms": 1000 * statistics.median(distinct),
            "refusal_max_ms": 1000 * max(distinct),
            "again_p50_ms": 1000 * statistics.median(again),
            "get_jobs_alone_ms": alone,
            "get_jobs_under_attack_ms": under,
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(home.parent, ignore_errors=True)


def _refusal_s(client: httpx.Client, body: dict[str, Any], selector: str) -> float:
    body["resources"]["devices"][0]["selector"] = selector
    started = time.perf_counter()
    answer = client.post("/v1/jobs", json=body)
    took = time.perf_counter() - started
    if answer.status_code != 422 or "max_comprehension_nesting" not in answer.text:
        raise SystemExit(f"the hostile selector was not refused: {answer.text}")
    return took


def _get_jobs_ms(client: httpx.Client, samples: int) -> float:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        client.get("/v1/jobs")
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--sync", choices=["FULL", "NORMAL", "both"], default="both")
    parser.add_argument(
        "--only",
        default="single,batch,latency,hostile",
        help="comma-separated sections: single, batch, latency, hostile",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="latency: also time each step of a submission (bench/service_latency.py)",
    )
    args = parser.parse_args()
    sections = set(args.only.split(","))
    modes = ["FULL", "NORMAL"] if args.sync == "both" else [args.sync]
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    if "single" in sections:
        print()
        print(
            "| SQLite synchronous | clients x threads | jobs | accepted/s | server CPU/job "
            "| errors | stored |"
        )
        print("|---|---|---|---|---|---|---|")
        for sync in modes:
            r = throughput(args.jobs, args.clients, args.threads, sync)
            print(
                f"| {sync} | {args.clients} x {args.threads} | {r['sent']:.0f} | "
                f"{r['per_second']:.0f} | {r['cpu_ms_per_job']:.2f} ms | {r['errors']:.0f} | "
                f"{r['stored']:.0f} |"
            )
    if "batch" in sections:
        print()
        print(
            "| SQLite synchronous | batch size | jobs | accepted/s | median batch jobs/s "
            "| server CPU/job | errors | stored |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for sync in modes:
            r = batch_throughput(args.jobs, args.batch_size, sync)
            print(
                f"| {sync} | {args.batch_size} | {r['accepted']:.0f} | {r['per_second']:.0f} | "
                f"{r['median_batch_per_second']:.0f} | {r['cpu_ms_per_job']:.2f} ms | "
                f"{r['errors']:.0f} | {r['stored']:.0f} |"
            )
    if "latency" in sections:
        for sync in modes:
            print()
            servers = [service_latency.Server("this checkout", sync, None, args.phases)]
            print_latency(sync, service_latency.latency(args.samples, sync, servers))
    if "hostile" in sections:
        samples = min(args.samples, 50)
        r = hostile(samples)
        print()
        print(
            "| samples | refusal of 3 nested comprehensions, distinct: p50 | max "
            "| the same again: p50 | GET /v1/jobs alone | under 8 hostile clients |"
        )
        print("|---|---|---|---|---|---|")
        print(
            f"| {samples} | {r['refusal_p50_ms']:.1f} ms | {r['refusal_max_ms']:.1f} ms | "
            f"{r['again_p50_ms']:.1f} ms | {r['get_jobs_alone_ms']:.1f} ms | "
            f"{r['get_jobs_under_attack_ms']:.1f} ms |"
        )
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
