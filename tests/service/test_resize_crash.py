"""A resize in progress survives a SIGKILL of ``hetsched up``: an elastic job grows through
its checkpoint notice, the service is killed inside the notice and started again on the
same home; the task in its notice is adopted, SIGTERM comes at the deadline first given,
the next run starts at the new count (each task told its count and rank), and no device is
ever held twice. A live shrink survives one too: the rank stopped is let go, the rank kept
runs on in the same process and reads its new count, and the job that asked for the room
gets it only once the rank has stopped."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import psutil
from service_fixtures import over_capacity

from hetsched.service.testing import ServerProcess
from waiting import eventually as _until
from waiting import log_lines as _lines

NOTICE_S = 5.0
CLUSTER = """
nodes:
  - name: gpu-node
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 2}
"""
GPU = {"cpu": "1", "memory": "512Mi", "devices": [{"class": "gpu", "count": 1}]}
#: notes each signal and each start (run, rank, count); the first run waits to be stopped
TASK = """
import os, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
env = os.environ
def on(signum, frame):
    log.write(f"{signal.Signals(signum).name} {time.time()} {env['HETSCHED_RUN']}\\n")
    if signum == signal.SIGTERM:
        sys.exit(0)
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGTERM, on)
log.write(f"start {time.time()} {env['HETSCHED_RUN']} {env['HETSCHED_RANK']} "
          f"{env['HETSCHED_REPLICAS']}\\n")
if env["HETSCHED_RUN"] == "1":
    while True:
        time.sleep(0.05)
"""


def _ended(client: Any, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job once it no longer runs, and its explanation then."""

    def ended() -> dict[str, Any] | None:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        return job if job["state"] != "running" else None

    return _until(ended), client.get(f"/v1/jobs/{job_id}/why").json()


def test_a_resize_in_its_notice_survives_a_sigkill_of_the_service(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    home = tmp_path / "home"
    args = ["--cluster", str(tmp_path / "cluster.yaml"), "--node-name", "local"]
    server = ServerProcess(home, [*args, "--kill-grace", "1"])
    log = tmp_path / "signals.log"
    server.start()
    try:
        with server.client() as client:
            other = {"name": "other", "command": ["sleep", "600"], "resources": GPU}
            other_id = client.post("/v1/jobs", json=other).json()["id"]
            _until(lambda: client.get(f"/v1/jobs/{other_id}").json()["state"] == "running")
            elastic = {
                "name": "elastic",
                "replicas": 2,
                "min_replicas": 1,
                "checkpoint": {"notice": f"{NOTICE_S:g}s"},
                "command": [sys.executable, "-c", TASK, str(log)],
                "resources": GPU,
            }
            job_id = client.post("/v1/jobs", json=elastic).json()["id"]
            assert _until(lambda: _lines(log))[0][2:] == ["1", "0", "1"]
            pid = client.get(f"/v1/jobs/{job_id}").json()["tasks"][0]["pid"]
            # the other job goes: the elastic one grows, through its notice
            client.post(f"/v1/jobs/{other_id}/cancel")
            _until(lambda: any(line[0] == "SIGUSR1" for line in _lines(log)))
            notice = json.loads((home / "checkpoints" / job_id / "NOTICE").read_text())
            job = client.get(f"/v1/jobs/{job_id}").json()
            assert job["count"] == 2  # what it resizes to
        server.kill9()
        assert psutil.pid_exists(int(pid))  # the task in its notice runs on
        assert not any(line[0] == "SIGTERM" for line in _lines(log))
        server.start()
        with server.client() as client:
            term = _until(lambda: [line for line in _lines(log) if line[0] == "SIGTERM"])
            assert float(term[0][1]) >= float(notice["deadline"]) - 0.05
            job, why = _ended(client, job_id)
    finally:
        server.stop()
        server.kill_tasks()
    assert job["state"] == "succeeded", job
    starts = [line[2:] for line in _lines(log) if line[0] == "start"]
    assert starts[0] == ["1", "0", "1"]
    assert sorted(starts[1:]) == [["2", "0", "2"], ["2", "1", "2"]]
    assert [(t["run"], t["task"], t["state"]) for t in job["tasks"]] == [
        (1, 0, "stopped"),
        (2, 0, "exited"),
        (2, 1, "exited"),
    ]
    assert job["preemptions"] == 0 and job["restarts"] == 0 and job["migrations"] == 0
    assert [c["count"] for c in why["counts"]] == [1, 2]
    assert "pending" not in [h["to"] for h in why["history"][1:]]
    db = sqlite3.connect(home / "hetsched.db")
    db.row_factory = sqlite3.Row
    history = db.execute("SELECT * FROM allocations").fetchall()
    db.close()
    assert over_capacity(history) == []
    assert [dict(r) for r in history if r["live"]] == []
    # the kept task's device went from run 1 to run 2 at the resize, never held twice
    kept = [r for r in history if r["task"] == 0 and r["job_id"] == job_id]
    assert [r["run"] for r in kept] == [1, 2]
    assert kept[0]["released_at"] == kept[1]["allocated_at"]


#: a live elastic job's task: notes its start and its pid; rank 1 on SIGTERM notes it and
#: takes 2 s to go; rank 0 waits for the resize file to say 1 task, notes it and ends
LIVE = """
import json, os, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
env = os.environ
rank = env["HETSCHED_RANK"]
def on_term(signum, frame):
    log.write(f"TERM {time.time()} {rank}\\n")
    time.sleep(2)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
log.write(f"start {os.getpid()} {env['HETSCHED_RUN']} {rank} {env['HETSCHED_REPLICAS']}\\n")
deadline = time.time() + 120
while time.time() < deadline:
    path = env["HETSCHED_RESIZE_FILE"]
    if rank == "0" and os.path.exists(path) and json.load(open(path))["replicas"] == 1:
        log.write(f"resized {os.getpid()} {json.load(open(path))['replicas']}\\n")
        sys.exit(0)
    time.sleep(0.05)
"""
PRIORITY = "queue_sort: priority\npost_filter: [{name: preemption, args: {grace_s: 5}}]\n"


def test_a_live_shrink_survives_a_sigkill_of_the_service(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "profile.yaml").write_text(PRIORITY)
    home = tmp_path / "home"
    args = ["--cluster", str(tmp_path / "cluster.yaml"), "--node-name", "local"]
    args += ["--profile", str(tmp_path / "profile.yaml"), "--kill-grace", "10"]
    server = ServerProcess(home, args)
    log = tmp_path / "live.log"
    server.start()
    try:
        with server.client() as client:
            elastic = {
                "name": "live",
                "replicas": 2,
                "min_replicas": 1,
                "resize": "live",
                "priority": 0,
                "command": [sys.executable, "-c", LIVE, str(log)],
                "resources": GPU,
            }
            job_id = client.post("/v1/jobs", json=elastic).json()["id"]
            _until(lambda: len([line for line in _lines(log) if line[0] == "start"]) == 2)
            # a job of higher priority takes one GPU: rank 1 is stopped, rank 0 runs on
            urgent = {"name": "urgent", "priority": 5, "command": ["sleep", "600"]}
            urgent_id = client.post("/v1/jobs", json={**urgent, "resources": GPU}).json()["id"]
            _until(lambda: any(line[0] == "TERM" for line in _lines(log)))
        server.kill9()  # inside rank 1's 2 s on its way out
        server.start()
        with server.client() as client:
            _until(lambda: client.get(f"/v1/jobs/{urgent_id}").json()["state"] == "running")
            job, why = _ended(client, job_id)
    finally:
        server.stop()
        server.kill_tasks()
    lines = _lines(log)
    starts = {line[3]: line[1:] for line in lines if line[0] == "start"}
    # nothing started again: run 1 throughout; rank 0 (same process) read its new count
    assert sorted(starts.values()) == sorted(
        [[starts["0"][0], "1", "0", "2"], [starts["1"][0], "1", "1", "2"]]
    )
    assert ["resized", starts["0"][0], "1"] in lines
    assert {line[2] for line in lines if line[0] == "TERM"} == {"1"}  # rank 0 never stopped
    assert job["state"] == "succeeded", job
    assert [(t["run"], t["task"], t["state"]) for t in job["tasks"]] == [
        (1, 0, "exited"),
        (1, 1, "stopped"),
    ]
    assert [c["count"] for c in why["counts"]] == [2, 1]
    db = sqlite3.connect(home / "hetsched.db")
    db.row_factory = sqlite3.Row
    history = db.execute("SELECT * FROM allocations").fetchall()
    db.close()
    # the urgent job got rank 1's GPU only once rank 1 had stopped: never held twice
    assert over_capacity(history) == []
