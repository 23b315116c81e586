"""The service with a standing backlog: ``bench/queue_scale.py --service N`` runs this.

Starts ``hetsched up`` (SQLite, the one-GPU cluster of ``bench/service_submit.py``) as a
subprocess, puts a job on the GPU (the hog), and submits N jobs that each want that GPU
through ``POST /v1/jobs/batch``, so N jobs stand pending. Then, with the backlog standing:

1. submit latency: single ``POST /v1/jobs`` one after another (each with an idempotency
   key, committed before its 201), client-side wall time;
2. the dashboard's calls and a page of ``hetsched jobs``: ``/v1/queues``, the first pages
   of running and of pending jobs, a page in the middle of the backlog (by cursor);
3. replacement start: the hog is cancelled and the backlog's jobs run one after another on
   the GPU; each prints the wall clock when it starts and when it ends (``date +%s.%N``),
   and the latency is the next job's start minus the previous job's end: the loop seeing
   the process exit, the turn, the spawn of ``sh``, as one number;
4. the server process's resident memory with the backlog in and its peak (``VmHWM``), and
   its CPU time.
"""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil

from service_submit import start_server

_BATCH = 5000
#: prints its start and end; short, so that many handovers happen in a few seconds
_CHAIN = {
    "name": "chain",
    "command": ["sh", "-c", "date +%s.%N; sleep 0.2; date +%s.%N"],
    "resources": {"cpu": "100m", "memory": "64Mi", "devices": [{"class": "gpu"}]},
}
_HOG = {
    "name": "hog",
    "command": ["sleep", "3600"],
    "resources": {"cpu": "100m", "memory": "64Mi", "devices": [{"class": "gpu"}]},
}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary_ms(values: list[float]) -> dict[str, float]:
    ms = [1000 * v for v in values]
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(_pct(ms, 0.99), 2),
        "max_ms": round(max(ms), 2),
    }


def _timed(client: httpx.Client, method: str, path: str, **kwargs: Any) -> float:
    started = time.perf_counter()
    answer = client.request(method, path, **kwargs)
    took = time.perf_counter() - started
    if answer.status_code >= 400:
        raise SystemExit(f"{method} {path}: HTTP {answer.status_code} {answer.text[:200]}")
    return took


def _fill(client: httpx.Client, pending: int) -> tuple[float, list[str]]:
    """Submit the backlog in batches; the time it took and the ids in submission order."""
    ids: list[str] = []
    started = time.perf_counter()
    while len(ids) < pending:
        size = min(_BATCH, pending - len(ids))
        answer = client.post(
            "/v1/jobs/batch",
            json={"jobs": [_CHAIN] * size},
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
        if answer.status_code != 201:
            raise SystemExit(f"batch refused: HTTP {answer.status_code} {answer.text[:200]}")
        ids += [j["id"] for j in answer.json()["jobs"]]
    return time.perf_counter() - started, ids


def _reads(client: httpx.Client, ids: list[str], repeats: int) -> dict[str, dict[str, float]]:
    cursor: str | None = None
    remaining = len(ids) // 2
    while remaining > 0:  # to the middle of the backlog, by cursor
        size = min(10_000, remaining)
        params: dict[str, Any] = {"limit": size, **({"cursor": cursor} if cursor else {})}
        cursor = client.get("/v1/jobs", params=params).headers.get("X-Next-Cursor")
        remaining -= size
    calls = {
        "GET /v1/queues": ("/v1/queues", {}),
        "GET /v1/jobs?state=running&limit=200": ("/v1/jobs", {"state": "running", "limit": 200}),
        "GET /v1/jobs?state=pending&limit=200": ("/v1/jobs", {"state": "pending", "limit": 200}),
        "GET /v1/jobs?limit=100&cursor=(middle)": ("/v1/jobs", {"limit": 100, "cursor": cursor}),
        "GET /v1/nodes": ("/v1/nodes", {}),
    }
    out: dict[str, dict[str, float]] = {}
    for name, (path, params) in calls.items():
        out[name] = _summary_ms(
            [_timed(client, "GET", path, params=params) for _ in range(repeats)]
        )
    return out


def _handovers(client: httpx.Client, ids: list[str], count: int) -> list[float]:
    """Cancel the hog (the caller did), wait for ``count + 1`` chain jobs to finish, and
    the gaps between one's end and the next one's start."""
    deadline = time.monotonic() + 60 + 2 * count
    first = ids[: count + 1]
    while time.monotonic() < deadline:
        last = client.get(f"/v1/jobs/{first[-1]}").json()
        if last["state"] in {"succeeded", "failed"}:
            break
        time.sleep(0.2)
    else:
        raise SystemExit("the backlog's first jobs did not finish in time")
    spans: list[tuple[float, float]] = []
    for job_id in first:
        data = client.get(f"/v1/jobs/{job_id}/logs").json()["data"]
        stamps = [float(t) for t in re.findall(r"^\d{9,}\.\d+$", data, re.MULTILINE)]
        spans.append((stamps[0], stamps[-1]))
    spans.sort()
    return [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(pending: int, submits: int, handovers: int, repeats: int) -> dict[str, Any]:
    """The measures above, with ``pending`` jobs standing."""
    home = Path(tempfile.mkdtemp(prefix="hetsched-backlog-")) / "home"
    proc, url = start_server(home, "NORMAL")
    server = psutil.Process(proc.pid)
    try:
        token = (home / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=600) as client:
            hog = client.post("/v1/jobs", json=_HOG).json()["id"]
            fill_s, ids = _fill(client, pending)
            time.sleep(5)  # let the loop take the backlog in before timing anything
            rss_backlog = server.memory_info().rss / 2**20
            submit = [
                _timed(
                    client,
                    "POST",
                    "/v1/jobs",
                    json=dict(_HOG, name="late"),
                    headers={"Idempotency-Key": uuid.uuid4().hex},
                )
                for _ in range(submits)
            ]
            reads = _reads(client, ids, repeats)
            client.post(f"/v1/jobs/{hog}/cancel")
            gaps = _handovers(client, ids, handovers)
            times = server.cpu_times()
            return {
                "pending": pending,
                "fill_s": round(fill_s, 1),
                "submit": _summary_ms(submit),
                "reads": reads,
                "replacement_start": _summary_ms(gaps),
                "rss_mb_with_backlog": round(rss_backlog, 1),
                "peak_rss_mb": round(_peak_rss_mb(proc.pid), 1),
                "server_cpu_s": round(times.user + times.system, 1),
            }
    finally:
        tasks = server.children(recursive=True)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for task in tasks:  # a stopped service leaves its tasks for the next start to adopt
            if task.is_running():
                task.kill()
        shutil.rmtree(home.parent, ignore_errors=True)


def print_table(result: dict[str, Any]) -> None:
    print(
        f"service with {result['pending']:,} pending jobs (backlog submitted in "
        f"{result['fill_s']} s); server CPU {result['server_cpu_s']} s"
    )
    rows = [("POST /v1/jobs (single)", result["submit"])]
    rows += list(result["reads"].items())
    rows.append(("replacement start (end -> next start)", result["replacement_start"]))
    for name, s in rows:
        print(
            f"  {name:<42} n={s['n']:>4}  p50 {s['p50_ms']:>8.2f} ms  "
            f"p99 {s['p99_ms']:>8.2f} ms  max {s['max_ms']:>8.2f} ms"
        )
    print(
        f"  resident memory with the backlog: {result['rss_mb_with_backlog']} MB; "
        f"peak (VmHWM): {result['peak_rss_mb']} MB",
        flush=True,
    )
