"""Submit-to-start latency of ``hetsched up`` at idle capacity, and where it goes.

With capacity free, jobs are submitted one at a time, 50 ms apart; a sample is from the
job's ``submitted_at`` (when the API admitted it, before its commit) to its task's
``started_at`` (when its process was spawned), both store timestamps. From the store too,
each sample splits in two: **to the loop** (the submission's commit, the hand-over, the
loop waking: up to the task's ``bound_at``, the start of the turn that bound it) and **in
the turn** (plan, commit of the turn's record, spawn).

``--phases`` runs the service under ``bench/service_phases.py``, which timestamps every
step, and adds a table of the phases: median and p99 of each, and the mean time the slowest
samples spent in each (where the tail comes from), plus the garbage collections that
overlapped a sample. ``--compare-src`` also starts the service of another checkout, and the
two are fed alternately, one submission each in turn, so the machine's load meets both
alike.

    .venv/bin/python bench/service_latency.py [--samples 200] [--sync FULL]
    .venv/bin/python bench/service_latency.py --phases --compare-src /path/to/before/src
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from hetsched.service.testing import free_port

__all__ = ["Server", "latency", "print_latency"]

_BENCH = Path(__file__).resolve().parent
_BODY = {"name": "lat", "command": ["true"], "resources": {"cpu": "100m", "memory": "64Mi"}}
_CLUSTER = """
nodes:
  - name: bench-node
    cpu: "64"
    memory: 256Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 1}
"""
#: (name, from, to) of the phases ``service_phases.py`` timestamps, in order
PHASES = [
    ("admit to commit", "admitted", "commit0"),
    ("commit (fsync)", "commit0", "commit1"),
    ("to the loop", "commit1", "turn"),
    ("turn to plan", "turn", "plan0"),
    ("plan", "plan0", "plan1"),
    ("plan to record", "plan1", "record0"),
    ("record turn (fsync)", "record0", "record1"),
    ("record to spawn", "record1", "spawn0"),
    ("spawn", "spawn0", "started"),
]


@dataclass
class Server:
    """One ``hetsched up`` in a temporary home (``src``: another checkout's package)."""

    label: str
    sync: str
    src: Path | None = None
    phases: bool = False
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="hetsched-lat-")))
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    token: str = ""

    @property
    def home(self) -> Path:
        return self.tmp / "home"

    @property
    def trace(self) -> Path:
        return self.tmp / "trace.txt"

    def start(self) -> None:
        cluster = self.tmp / "cluster.yaml"
        cluster.write_text(_CLUSTER)
        port = free_port()
        if self.phases:
            argv = [sys.executable, str(_BENCH / "service_phases.py"), str(self.trace), "up"]
        else:
            argv = [sys.executable, "-c", "from hetsched.cli.main import main; main()", "up"]
        argv += ["--home", str(self.home), "--port", str(port), "--cluster", str(cluster)]
        argv += ["--rate-limit", "0", "--sync", self.sync]
        env = dict(os.environ)
        if self.src is not None:
            env["PYTHONPATH"] = str(self.src)
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    self.token = (self.home / "admin.token").read_text().strip()
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise SystemExit(f"{self.label}: the server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class Result:
    label: str
    #: job id -> seconds from submission to start, and its two parts from the store
    totals: dict[str, float]
    to_loop: dict[str, float]
    in_turn: dict[str, float]
    #: job id -> phase name -> seconds (with --phases)
    phases: dict[str, dict[str, float]]
    #: job id -> seconds of garbage collection during the sample (with --phases)
    gc: dict[str, float]

    def slowest(self, share: float = 0.02) -> list[str]:
        ranked = sorted(self.totals, key=self.totals.__getitem__)
        return ranked[-max(1, round(share * len(ranked))) :]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(samples: int, sync: str, servers: list[Server]) -> list[Result]:
    """Submit ``samples`` jobs to each server, alternating; their latencies and phases."""
    try:
        for server in servers:
            server.start()
        clients = {
            s.label: httpx.Client(
                base_url=s.url, headers={"Authorization": f"Bearer {s.token}"}, timeout=30
            )
            for s in servers
        }
        ids: dict[str, list[str]] = {s.label: [] for s in servers}
        for index in range(samples):
            # each server gets one submission every 50 ms; who goes first alternates
            order = servers if index % 2 == 0 else servers[::-1]
            for server in order:
                answer = clients[server.label].post("/v1/jobs", json=_BODY)
                ids[server.label].append(answer.json()["id"])
                time.sleep(0.05 / len(servers))
        for server in servers:
            _wait_started(clients[server.label], ids[server.label])
        return [_result(server) for server in servers]
    finally:
        for server in servers:
            server.stop()


def _wait_started(client: httpx.Client, ids: list[str]) -> None:
    deadline = time.monotonic() + 120
    for job_id in ids:
        while True:
            tasks = client.get(f"/v1/jobs/{job_id}").json().get("tasks", [])
            if tasks and tasks[0]["started_at"]:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job_id} did not start")
            time.sleep(0.05)


def _result(server: Server) -> Result:
    db = sqlite3.connect(f"file:{server.home / 'hetsched.db'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT j.id, j.submitted_at, t.bound_at, t.started_at FROM jobs j "
            "JOIN tasks t ON t.job_id = j.id AND t.task = 0 "
            "WHERE t.run = (SELECT MIN(run) FROM tasks WHERE job_id = j.id)"
        ).fetchall()
    finally:
        db.close()
    result = Result(server.label, {}, {}, {}, {}, {})
    for job_id, submitted, bound, started in rows:
        result.totals[job_id] = started - submitted
        result.to_loop[job_id] = bound - submitted
        result.in_turn[job_id] = started - bound
    if server.phases:
        _read_trace(server.trace, result)
    return result


def _read_trace(trace: Path, result: Result) -> None:
    points: dict[str, dict[str, float]] = {}
    collections: list[tuple[float, float]] = []
    for line in trace.read_text().splitlines():
        kind, *fields = line.split()
        if kind == "commit":
            job, admitted, begin, end, _group = fields
            points.setdefault(job, {}).update(
                admitted=float(admitted), commit0=float(begin), commit1=float(end)
            )
        elif kind == "started":
            job, *times = fields
            names = ("turn", "plan0", "plan1", "record0", "record1", "spawn0", "started")
            points.setdefault(job, {}).update(zip(names, map(float, times), strict=True))
        elif kind == "gc":
            collections.append((float(fields[0]), float(fields[1])))
    for job, at in points.items():
        if job not in result.totals or "started" not in at or "admitted" not in at:
            continue
        result.phases[job] = {name: at[end] - at[begin] for name, begin, end in PHASES}
        begin, end = at["admitted"], at["started"]
        result.gc[job] = sum(
            max(0.0, min(end, t + took) - max(begin, t)) for t, took in collections
        )


def print_latency(sync: str, results: list[Result]) -> None:
    """Markdown tables: latency per service; with phases, where each service's time went."""
    print(
        "| service | SQLite synchronous | samples | submit-to-start p50 | p99 | max "
        "| to the loop p50 / p99 | in the turn p50 / p99 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        totals = list(r.totals.values())
        loop, turn = list(r.to_loop.values()), list(r.in_turn.values())
        print(
            f"| {r.label} | {sync} | {len(totals)} | {1000 * statistics.median(totals):.1f} ms "
            f"| {1000 * _percentile(totals, 0.99):.1f} ms | {1000 * max(totals):.1f} ms "
            f"| {1000 * statistics.median(loop):.1f} / {1000 * _percentile(loop, 0.99):.1f} ms "
            f"| {1000 * statistics.median(turn):.1f} / {1000 * _percentile(turn, 0.99):.1f} ms |"
        )
    traced = [r for r in results if r.phases]
    if not traced:
        return
    print()
    heads = " | ".join(f"{r.label}: p50 / p99 / slowest 2 %" for r in traced)
    print(f"| phase (ms) | {heads} |")
    print("|---|" + "---|" * len(traced))
    for name, *_ in [*PHASES, ("garbage collection during the sample", "", "")]:
        cells = []
        for r in traced:
            of = (
                {j: r.gc[j] for j in r.phases}
                if name.startswith("garbage")
                else {j: p[name] for j, p in r.phases.items()}
            )
            slow = [of[j] for j in r.slowest() if j in of]
            values = list(of.values())
            cells.append(
                f"{1000 * statistics.median(values):.2f} / {1000 * _percentile(values, 0.99):.2f}"
                f" / {1000 * statistics.fmean(slow) if slow else 0.0:.2f}"
            )
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--sync", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument(
        "--phases", action="store_true", help="timestamp every step (bench/service_phases.py)"
    )
    parser.add_argument(
        "--compare-src",
        type=Path,
        help="also run the service of another checkout's src/ directory, fed alternately",
    )
    args = parser.parse_args()
    servers = [Server("this checkout", args.sync, None, args.phases)]
    if args.compare_src is not None:
        servers.insert(0, Server(str(args.compare_src), args.sync, args.compare_src, args.phases))
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print()
    print_latency(args.sync, latency(args.samples, args.sync, servers))
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
