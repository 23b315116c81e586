"""A restart of the service in the middle of a preemption notice: the task in its notice is
adopted (not killed), SIGTERM follows at the deadline it was first given, not before, its
job's lost work is counted, and the job resumes afterwards. The real service, restarted on
the same home, with a real process."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from service_fixtures import Api, service_options

from hetsched.service.testing import running

NOTICE_S = 6.0
GPU = {"cpu": "1", "memory": "512Mi", "devices": [{"class": "gpu", "count": 1}]}
CLUSTER = """
nodes:
  - name: gpu-node
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 1}
"""
PROFILE = """
queue_sort: priority
post_filter: [{name: preemption, args: {grace_s: 3}}]
"""
#: a task that never checkpoints: it notes each signal (with the time) and ends on SIGTERM
TASK = """
import os, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
def on(signum, frame):
    log.write(f"{signal.Signals(signum).name} {time.time()} {os.environ['HETSCHED_RUN']}\\n")
    if signum == signal.SIGTERM:
        sys.exit(0)
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGTERM, on)
log.write(f"start {time.time()} {os.environ['HETSCHED_RUN']}\\n")
if os.environ["HETSCHED_RUN"] != "1":
    sys.exit(0)
while True:
    time.sleep(0.05)
"""


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _until(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)
    return found


def test_a_restart_inside_a_notice_keeps_its_deadline(tmp_path: Path) -> None:
    (tmp_path / "gpu.yaml").write_text(CLUSTER)
    (tmp_path / "profile.yaml").write_text(PROFILE)
    options = service_options(
        tmp_path, cluster=[tmp_path / "gpu.yaml"], profile=tmp_path / "profile.yaml"
    )
    signals = tmp_path / "signals.log"
    body = {
        "name": "slow-saver",
        "checkpoint": {"notice_s": f"{NOTICE_S:g}s"},
        "resources": GPU,
        "command": [sys.executable, "-c", TASK, str(signals)],
    }
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        _until(lambda: any(line[0] == "start" for line in _lines(signals)))
        urgent = {"name": "urgent", "priority": 10, "resources": GPU, "command": ["true"]}
        urgent_id = api.alice.post("/v1/jobs", json=urgent).json()["id"]
        _until(lambda: any(line[0] == "SIGUSR1" for line in _lines(signals)))
        job = api.alice.get(f"/v1/jobs/{job_id}").json()
        pid = job["tasks"][0]["pid"]
        notice = json.loads((tmp_path / "home" / "checkpoints" / job_id / "NOTICE").read_text())
        deadline = float(notice["deadline"])
        alice_token = api.tokens["alice"]
        api.close()
    # the service is gone, mid-notice; the task runs on
    assert psutil.pid_exists(pid)
    assert not any(line[0] == "SIGTERM" for line in _lines(signals))
    with running(options) as svc:
        api = Api(svc)
        alice = api.client(alice_token)
        term = _until(lambda: [line for line in _lines(signals) if line[0] == "SIGTERM"])
        # SIGTERM at the deadline of the notice given before the restart: not at the
        # restart (the old behaviour killed the task at once), not before the deadline
        assert float(term[0][1]) >= deadline - 0.05
        job = api.wait(alice, job_id, {"succeeded", "failed"}, timeout=60)
        assert job["state"] == "succeeded" and job["preemptions"] == 1
        assert [t["run"] for t in job["tasks"]] == [1, 2]
        assert job["tasks"][0]["state"] == "stopped"
        # the run saved nothing: it lost the time from its start to the preemption
        assert job["lost_work_s"] > 0
        urgent_job = api.wait(alice, urgent_id, {"succeeded", "failed"}, timeout=60)
        assert urgent_job["state"] == "succeeded"
        # the urgent job started only once the victim had stopped
        assert urgent_job["first_started_at"] >= float(term[0][1]) - 0.05
        api.close()


def test_a_run_adopted_running_and_preempted_later_counts_its_lost_work(tmp_path: Path) -> None:
    (tmp_path / "gpu.yaml").write_text(CLUSTER)
    (tmp_path / "profile.yaml").write_text(PROFILE)
    options = service_options(
        tmp_path, cluster=[tmp_path / "gpu.yaml"], profile=tmp_path / "profile.yaml"
    )
    signals = tmp_path / "signals.log"
    body = {
        "name": "slow-saver",
        "checkpoint": {"notice_s": "1s"},
        "resources": GPU,
        "command": [sys.executable, "-c", TASK, str(signals)],
    }
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        _until(lambda: any(line[0] == "start" for line in _lines(signals)))
        alice_token = api.tokens["alice"]
        api.close()
    with running(options) as svc:
        api = Api(svc)
        alice = api.client(alice_token)
        urgent = {"name": "urgent", "priority": 10, "resources": GPU, "command": ["true"]}
        alice.post("/v1/jobs", json=urgent)
        job = api.wait(alice, job_id, {"succeeded", "failed"}, timeout=60)
        assert job["state"] == "succeeded" and job["preemptions"] == 1
        # the adopted run saved nothing: it lost the time from its start (its bind, a moment
        # before) to the preemption
        stopped = next(t for t in job["tasks"] if t["run"] == 1)
        assert 0 < job["lost_work_s"] <= stopped["ended_at"] - stopped["started_at"] + 1
        api.close()
