"""Body of the standby pair test on Ray: two `hetsched up --executor ray --lease` on one
PostgreSQL (a throwaway server inside the namespace) and one home; the leader SIGKILLed
with tasks running on the Ray nodes; the standby takes over and adopts them through the
node agents (the same instance, so the same agents)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from ray_bodies_service import _release, _wait_started
from ray_service import HETSCHED, Up, free_port, job, read_starts

from hetsched.ray.testing import ClusterInfo


@contextmanager
def _postgres() -> Iterator[str]:
    bindir = Path(shutil.which("initdb") or "/usr/lib/postgresql/15/bin/initdb").parent
    data = Path(tempfile.mkdtemp(prefix="hetsched-pair-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    initdb = [str(bindir / "initdb"), "-D", str(data / "db"), "-U", "postgres", "-A", "trust"]
    subprocess.run([*prefix, *initdb], check=True, capture_output=True, timeout=120)
    ctl = [str(bindir / "pg_ctl"), "-D", str(data / "db")]
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    start = [*ctl, "-o", options, "-l", str(data / "log"), "-w", "start"]
    subprocess.run([*prefix, *start], check=True, capture_output=True, timeout=120)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, *ctl, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def _leads(up: Up) -> bool:
    try:
        health = httpx.get(f"{up.url}/healthz", timeout=2).json()
    except (httpx.HTTPError, ValueError):
        return False
    return bool(health.get("ok")) and health.get("role") != "standby"


def _until(check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _start(up: Up, lead: bool) -> Up:
    """Start ``up``; wait until it answers (and leads, with ``lead``: the admin token is
    written by the first leader's start)."""
    argv = [HETSCHED, "up", "--home", str(up.home), "--port", str(up.port), *up.args]
    with up.log.open("ab") as out:
        up.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    token_file = up.home / "admin.token"
    _until(lambda: (_leads(up) if lead else _answers(up)) and token_file.exists(), 120)
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    up.client = httpx.Client(base_url=up.url, headers=headers, timeout=30)
    return up


def _answers(up: Up) -> bool:
    try:
        return httpx.get(f"{up.url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def failover(cluster: ClusterInfo) -> dict[str, Any]:
    scratch = Path(cluster.scratch) / "pair"
    scratch.mkdir(parents=True, exist_ok=True)
    with _postgres() as db:
        args = ["--executor", "ray", "--ray-address", cluster.address, "--kill-grace", "2"]
        args += ["--db", db, "--lease", "cp", "--lease-s", "4"]
        a = _start(Up(scratch / "home", args, scratch / "a.log"), lead=True)
        b = _start(Up(scratch / "home", args, scratch / "b.log"), lead=False)
        try:
            cpu = {"cpu": "1", "memory": "256Mi"}
            ids = [a.submit(job(f"pair-{i}", scratch, cpu)) for i in range(4)]
            for job_id in ids:
                _wait_started(a, scratch, job_id)
            a.kill()
            killed = time.monotonic()
            _until(lambda: _leads(b), 60)
            takeover = time.monotonic() - killed
            for job_id in ids:
                _release(scratch, job_id)
            jobs = b.wait(ids, {"succeeded", "failed", "cancelled"})
            starts = [(s["job"], s["run"]) for s in read_starts(scratch)]
            return {
                "takeover_s": takeover,
                "states": [jobs[i]["state"] for i in ids],
                "runs": [jobs[i]["run"] for i in ids],
                "starts": {i: starts.count((i, 1)) for i in ids},
                "other_runs": [s for s in starts if s[1] != 1],
                "log": b.tail(2000),
            }
        finally:
            b.stop()
            a.stop()
