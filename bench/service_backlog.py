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
   its CPU time: in all, per single submission, and per job run in the handover phase (on
   a shared machine the CPU figures, not the latencies, say what the service costs).

Run alone, it measures several backlog sizes one after another, to show what grows:

    .venv/bin/python bench/service_backlog.py --pending 5000 50000
"""

from __future__ import annotations

import argparse
import json
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


def _wait_done(client: httpx.Client, ids: list[str], count: int) -> None:
    """Wait (the caller cancelled the hog) until ``count + 1`` chain jobs have finished."""
    deadline = time.monotonic() + 60 + 2 * count
    last = ids[count]
    while time.monotonic() < deadline:
        if client.get(f"/v1/jobs/{last}").json()["state"] in {"succeeded", "failed"}:
            return
        time.sleep(0.2)
    raise SystemExit("the backlog's first jobs did not finish in time")


def _handovers(client: httpx.Client, ids: list[str], count: int) -> list[float]:
    """The gaps between one finished chain job's end and the next one's start."""
    spans: list[tuple[float, float]] = []
    for job_id in ids[: count + 1]:
        data = client.get(f"/v1/jobs/{job_id}/logs").json()["data"]
        stamps = [float(t) for t in re.findall(r"^\d{9,}\.\d+$", data, re.MULTILINE)]
        spans.append((stamps[0], stamps[-1]))
    spans.sort()
    return [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]


def _cpu_s(server: psutil.Process) -> float:
    times = server.cpu_times()
    return float(times.user + times.system)


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
            cpu_before = _cpu_s(server)
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
            cpu_submits = _cpu_s(server) - cpu_before
            reads = _reads(client, ids, repeats)
            cpu_before = _cpu_s(server)
            client.post(f"/v1/jobs/{hog}/cancel")
            _wait_done(client, ids, handovers)
            cpu_handovers = _cpu_s(server) - cpu_before
            gaps = _handovers(client, ids, handovers)
            return {
                "pending": pending,
                "fill_s": round(fill_s, 1),
                "submit": _summary_ms(submit),
                "reads": reads,
                "replacement_start": _summary_ms(gaps),
                "rss_mb_with_backlog": round(rss_backlog, 1),
                "peak_rss_mb": round(_peak_rss_mb(proc.pid), 1),
                "server_cpu_s": round(_cpu_s(server), 1),
                # server CPU per single submission, and per job run in the handover phase
                # (its exit, the turn, the next spawn, and the client's state polls)
                "cpu_ms_per_submit": round(1000 * cpu_submits / submits, 2),
                "cpu_ms_per_handover": round(1000 * cpu_handovers / (handovers + 1), 2),
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
        f"  server CPU per single submission: {result['cpu_ms_per_submit']} ms; per job run "
        f"in the handover phase: {result['cpu_ms_per_handover']} ms"
    )
    print(
        f"  resident memory with the backlog: {result['rss_mb_with_backlog']} MB; "
        f"peak (VmHWM): {result['peak_rss_mb']} MB",
        flush=True,
    )


def main() -> None:
    """Several backlog sizes one after another, to see what grows with the backlog."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--submits", type=int, default=300)
    parser.add_argument("--handovers", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=20, help="of each read")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = []
    for pending in args.pending:
        result = run(pending, args.submits, args.handovers, args.repeats)
        print_table(result)
        results.append(result)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
