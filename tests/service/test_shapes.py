"""Elastic and heterogeneous jobs in the real service, with real processes: what each task
finds in its own environment (count and rank; group, index, host, port and peers), a driver
that reaches its workers at the addresses its peers list, and an elastic job that grows by
starting again at the new count."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from service_fixtures import Api, service_options, serving
from typer.testing import CliRunner

import peer_task
from hetsched.cli.main import app
from waiting import eventually as _until
from waiting import log_lines as _lines

CLUSTER = """
nodes:
  - name: gpu-node
    cpu: "16"
    memory: 64Gi
    devices:
      - {class: gpu, vendor: nvidia, model: A100, count: 2}
  - name: cpu-node
    cpu: "8"
    memory: 16Gi
"""
GPU = {"cpu": "1", "memory": "512Mi", "devices": [{"class": "gpu", "count": 1}]}


def _options(tmp_path: Path) -> Any:
    (tmp_path / "shapes.yaml").write_text(CLUSTER)
    return service_options(tmp_path, cluster=[tmp_path / "shapes.yaml"])


def test_a_driver_reaches_its_workers_at_the_addresses_its_peers_list(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    body = {
        "name": "hetero",
        "command": peer_task.command("worker", out),
        "groups": [
            {"name": "workers", "replicas": 2, "resources": GPU},
            {
                "name": "driver",
                "resources": {"cpu": "4", "memory": "1Gi"},
                "command": peer_task.command("driver", out),
            },
        ],
    }
    with serving(_options(tmp_path)) as api:
        answer = api.alice.post("/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        job = api.wait(api.alice, answer.json()["id"], {"succeeded", "failed"}, timeout=90)
    assert job["state"] == "succeeded", job
    envs = {p.stem: json.loads(p.read_text()) for p in out.glob("*.env")}
    assert sorted(envs) == ["driver-0", "workers-0", "workers-1"]
    peers = json.loads(envs["driver-0"]["HETSCHED_PEERS"])
    for name, env in envs.items():
        group, index = name.split("-")
        assert (env["HETSCHED_GROUP"], env["HETSCHED_GROUP_INDEX"]) == (group, index)
        assert json.loads(env["HETSCHED_PEERS"]) == peers  # every task sees the same map
        listed = peers[group][int(index)]
        # each task's own address is the one the others were given
        assert listed == {
            "index": int(index),
            "host": env["HETSCHED_HOST"],
            "port": int(env["HETSCHED_PORT"]),
        }
        assert env["HETSCHED_REPLICAS"] == "3"
    # tasks are numbered across the groups in order: the workers 0 and 1, the driver 2
    assert [envs[n]["HETSCHED_RANK"] for n in ("workers-0", "workers-1", "driver-0")] == [
        "0",
        "1",
        "2",
    ]
    assert {(p.stem, p.read_text()) for p in out.glob("*.got")} == {
        ("workers-0", "hello worker 0"),
        ("workers-1", "hello worker 1"),
    }
    nodes = {t["task"]: t["node"] for t in job["tasks"]}
    assert nodes == {0: "gpu-node", 1: "gpu-node", 2: "cpu-node"}


#: logs "start <run> <rank> <replicas>"; the first run waits to be stopped, later ones end
ELASTIC = """
import os, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
env = os.environ
log.write(f"start {env['HETSCHED_RUN']} {env['HETSCHED_RANK']} {env['HETSCHED_REPLICAS']}\\n")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if env["HETSCHED_RUN"] == "1":
    while True:
        time.sleep(0.05)
"""


def test_an_elastic_job_starts_partially_then_grows_through_a_restart(tmp_path: Path) -> None:
    log = tmp_path / "elastic.log"
    with serving(_options(tmp_path)) as api:
        other = api.alice.post(
            "/v1/jobs", json={"name": "other", "command": ["sleep", "600"], "resources": GPU}
        ).json()["id"]
        api.wait(api.alice, other, {"running"})
        body = {
            "name": "elastic",
            "replicas": 4,
            "min_replicas": 1,
            "command": [sys.executable, "-c", ELASTIC, str(log)],
            "resources": GPU,
        }
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        # one GPU is free: it starts with 1 task, told so
        assert _until(lambda: _lines(log)) == [["start", "1", "0", "1"]]
        job = api.alice.get(f"/v1/jobs/{job_id}").json()
        assert job["count"] == 1 and job["min_replicas"] == 1 and job["replicas"] == 4
        assert api.alice.post(f"/v1/jobs/{other}/cancel").status_code == 202
        job = _grown(api, job_id)
    starts = _lines(log)
    assert starts[0] == ["start", "1", "0", "1"]
    assert sorted(starts[1:]) == [["start", "2", "0", "2"], ["start", "2", "1", "2"]]
    assert [(t["run"], t["task"], t["state"]) for t in job["tasks"]] == [
        (1, 0, "stopped"),
        (2, 0, "exited"),
        (2, 1, "exited"),
    ]


def _grown(api: Api, job_id: str) -> dict[str, Any]:
    job = api.wait(api.alice, job_id, {"succeeded", "failed"}, timeout=60)
    assert job["state"] == "succeeded", job
    why = api.alice.get(f"/v1/jobs/{job_id}/why").json()
    causes = [h["cause"] for h in why["history"]]
    assert any("growing from 1 to 2 tasks" in c for c in causes), causes
    assert any("resized from 1 to 2 tasks" in c for c in causes), causes
    assert [c["count"] for c in why["counts"]] == [1, 2]
    return job


def _cli(api: Api, *args: str) -> tuple[int, str]:
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": api.tokens["alice"], "COLUMNS": "200"}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout + result.stderr


def test_the_cli_submits_an_elastic_job_and_shows_its_count(tmp_path: Path) -> None:
    with serving(_options(tmp_path)) as api:
        code, out = _cli(
            api, "submit", "-o", "json", "--gpu", "1", "--replicas", "4", "--min-replicas", "1",
            "--resize", "live", "--", "sleep", "30",
        )  # fmt: skip
        assert code == 0, out
        job_id = json.loads(out)[0]["id"]
        job = api.wait(api.alice, job_id, {"running"})
        assert (job["count"], job["min_replicas"], job["resize"]) == (2, 1, "live")
        code, out = _cli(api, "job", job_id)
        assert "count  2 (elastic, 1 to 4, resized by live)" in out, out
        code, out = _cli(api, "why", job_id)
        assert "\ncount\n" in out and "2 tasks" in out, out
        # the list: its count and bounds (json and the wide table's tasks column)
        code, out = _cli(api, "jobs", "-o", "json")
        (listed,) = [j for j in json.loads(out) if j["id"] == job_id]
        assert (listed["count"], listed["min_replicas"], listed["replicas"]) == (2, 1, 4)
        code, out = _cli(api, "jobs", "-o", "wide")
        assert code == 0 and "2 of 1-4" in out, out
        code, out = _cli(api, "submit", "--min-replicas", "5", "--replicas", "4", "--", "true")
        assert code != 0 and "min_replicas must be 1..replicas (4), got 5" in out, out
        api.alice.post(f"/v1/jobs/{job_id}/cancel")


#: rank 0 waits for the resize file and logs it; every rank logs its start and ends
LIVE = """
import json, os, sys, time
log = open(sys.argv[1], "a", buffering=1)
env = os.environ
log.write(f"start {env['HETSCHED_RUN']} {env['HETSCHED_RANK']} {env['HETSCHED_REPLICAS']}\\n")
if env["HETSCHED_RANK"] == "0":
    deadline = time.time() + 60
    while not os.path.exists(env["HETSCHED_RESIZE_FILE"]):
        assert time.time() < deadline
        time.sleep(0.05)
    told = json.load(open(env["HETSCHED_RESIZE_FILE"]))
    log.write(f"resized {told['run']} {told['replicas']}\\n")
"""


def test_a_live_elastic_job_grows_without_stopping_its_running_task(tmp_path: Path) -> None:
    log = tmp_path / "live.log"
    with serving(_options(tmp_path)) as api:
        other = api.alice.post(
            "/v1/jobs", json={"name": "other", "command": ["sleep", "600"], "resources": GPU}
        ).json()["id"]
        api.wait(api.alice, other, {"running"})
        body = {
            "name": "live",
            "replicas": 2,
            "min_replicas": 1,
            "resize": "live",
            "command": [sys.executable, "-c", LIVE, str(log)],
            "resources": GPU,
        }
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        assert _until(lambda: _lines(log)) == [["start", "1", "0", "1"]]
        api.alice.post(f"/v1/jobs/{other}/cancel")
        job = api.wait(api.alice, job_id, {"succeeded", "failed"}, timeout=60)
    assert job["state"] == "succeeded", job
    lines = _lines(log)
    # rank 0 ran on (run 1 throughout) and read its new count; rank 1 joined run 1
    assert ["start", "1", "1", "2"] in lines and ["resized", "1", "2"] in lines
    assert [(t["run"], t["task"], t["state"]) for t in job["tasks"]] == [
        (1, 0, "exited"),
        (1, 1, "exited"),
    ]
