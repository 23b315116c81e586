"""Fault 1 of the hostile round, reproduced exactly: a SIGKILL while a cancelled task is in
its stop grace.

``hetsched up --kill-grace 5`` runs a job whose command ignores SIGTERM on a device; the job
is cancelled, and the service is killed with SIGKILL one second later, while the task is
``stopping`` (its SIGTERM sent, its SIGKILL four seconds away). Before the fix the restart
left the task row ``stopping`` and its allocation live while the core believed the device
free: the next job wanting the device made every loop turn fail on the store's unique index,
and no job of any kind started again.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from hetsched.service.testing import ServerProcess

pytestmark = pytest.mark.slow

CLUSTER = """
nodes:
  - name: wedge-node
    cpu: "8"
    memory: 16Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 1}
"""

TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}
GPU = {"cpu": "1", "memory": "256Mi", "devices": [{"class": "gpu", "count": 1}]}


def _wait(client: httpx.Client, job_id: str, pred: Any, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if pred(job):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def _until_sleeping(pid: int, timeout: float = 60) -> None:
    """Until a ``sleep`` runs under process ``pid``."""
    deadline = time.monotonic() + timeout
    while not any(_name(p) == "sleep" for p in psutil.Process(pid).children(recursive=True)):
        assert time.monotonic() < deadline, "the task's sleep did not start"
        time.sleep(0.05)


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:  # it ended meanwhile
        return ""


def _failures(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("hetsched_loop_turn_failures_total"))
    return float(line.split()[-1])


def test_sigkill_during_a_cancelled_tasks_stop_grace_does_not_wedge(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    args = ["--cluster", str(cluster), "--node-name", "local", "--kill-grace", "5"]
    server = ServerProcess(tmp_path / "home", args)
    server.start()
    try:
        with server.client() as client:
            body = {
                "name": "stubborn",
                "command": ["sh", "-c", "trap '' TERM; sleep 60"],
                "resources": GPU,
            }
            stubborn = client.post("/v1/jobs", json=body).json()["id"]
            job = _wait(client, stubborn, lambda j: any(t["pid"] for t in j.get("tasks", [])))
            pid = job["tasks"][0]["pid"]
            # its sleep runs, so its shell ignores SIGTERM already: a cancel before that
            # (a busy machine) would end it at once and never reach the grace
            _until_sleeping(pid)
            assert client.post(f"/v1/jobs/{stubborn}/cancel").status_code == 202
            _wait(client, stubborn, lambda j: j["state"] == "cancelled")
        time.sleep(1.0)
        # the task ignored its SIGTERM and is within its 5 s grace
        assert psutil.pid_exists(pid)
        server.kill9()
        server.start()
        with server.client() as client:
            next_gpu = client.post(
                "/v1/jobs", json={"name": "next", "command": ["true"], "resources": GPU}
            ).json()["id"]
            cpu_only = client.post(
                "/v1/jobs",
                json={"name": "cpu", "command": ["true"], "resources": {"cpu": "1"}},
            ).json()["id"]
            for job_id in (next_gpu, cpu_only):
                done = _wait(client, job_id, lambda j: j["state"] in TERMINAL)
                assert done["state"] == "succeeded", done
            stubborn_job = client.get(f"/v1/jobs/{stubborn}").json()
            assert _failures(client) == 0, server.log_text()[-3000:]
    finally:
        server.stop()
        server.kill_tasks()
    assert stubborn_job["state"] == "cancelled"
    assert [t["state"] for t in stubborn_job["tasks"]] == ["stopped"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert "UNIQUE constraint failed" not in server.log_text()
    db = sqlite3.connect(tmp_path / "home" / "hetsched.db")
    try:
        live = db.execute("SELECT job_id, device_id FROM allocations WHERE live").fetchall()
        unreleased = db.execute(
            "SELECT count(*) FROM allocations WHERE job_id = ? AND released_at IS NULL",
            (stubborn,),
        ).fetchone()[0]
        stubborn_releases = db.execute(
            "SELECT count(*) FROM allocations WHERE job_id = ?", (stubborn,)
        ).fetchone()[0]
    finally:
        db.close()
    assert live == []
    assert unreleased == 0 and stubborn_releases == 1
