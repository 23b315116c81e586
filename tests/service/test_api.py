"""The API against the real app: real HTTP, a real SQLite file, real processes."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import psutil
from service_fixtures import Api, job_body, service_options, serving


def test_a_job_runs_to_success_with_logs_history_and_devices(api: Api) -> None:
    body = job_body(
        name="hello",
        command=["sh", "-c", 'echo "gpus=$CUDA_VISIBLE_DEVICES"; echo "$HETSCHED_DEVICES"'],
        resources={"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "model": "A100"}]},
    )
    answer = api.alice.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    job = api.wait(api.alice, job_id, {"succeeded", "failed"})
    assert job["state"] == "succeeded"
    assert job["exit_code"] == 0
    [task] = job["tasks"]
    assert task["node"] == "gpu-node" and task["state"] == "exited"
    log = api.alice.get(f"/v1/jobs/{job_id}/logs").json()["data"]
    index = task["devices"][0]["id"].rsplit("gpu", 1)[1]
    assert f"gpus={index}" in log
    devices = json.loads(log.strip().splitlines()[-1])
    assert devices[0]["model"] == "A100" and devices[0]["share"] == 1000
    why = api.alice.get(f"/v1/jobs/{job_id}/why").json()
    assert [h["to"] for h in why["history"]] == ["pending", "running", "succeeded"]


def test_fpga_and_amd_devices_are_exposed_the_way_frameworks_expect(api: Api) -> None:
    script = (
        'echo "rocr=$ROCR_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES cuda=[$CUDA_VISIBLE_DEVICES]"; '
        'echo "$HETSCHED_DEVICES"'
    )
    body = job_body(
        command=["sh", "-c", script],
        resources={
            "cpu": "1",
            "memory": "1Gi",
            "devices": [{"class": "gpu", "model": "MI250"}],
        },
    )
    amd = api.alice.post("/v1/jobs", json=body).json()["id"]
    fpga_body = job_body(
        command=["sh", "-c", 'echo "$HETSCHED_DEVICES"'],
        resources={"cpu": "1", "memory": "1Gi", "devices": [{"class": "fpga"}]},
    )
    fpga = api.alice.post("/v1/jobs", json=fpga_body).json()["id"]
    api.wait(api.alice, amd, {"succeeded"})
    api.wait(api.alice, fpga, {"succeeded"})
    amd_log = api.alice.get(f"/v1/jobs/{amd}/logs").json()["data"]
    assert "rocr=0 hip=0 cuda=[]" in amd_log
    fpga_log = api.alice.get(f"/v1/jobs/{fpga}/logs").json()["data"]
    described = json.loads(fpga_log.strip().splitlines()[-1])
    assert described == [
        {
            "id": "fpga-node/fpga0",
            "class": "fpga",
            "vendor": "xilinx",
            "model": "U250",
            "index": 0,
            "share": 1000,
        }
    ]


def test_env_workdir_and_stderr(api: Api, tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = job_body(
        command=["sh", "-c", 'pwd; echo "$GREETING"; echo oops >&2; exit 3'],
        env={"GREETING": "hi there"},
        workdir=str(tmp_path),
    )
    job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
    job = api.wait(api.alice, job_id, {"failed", "succeeded"})
    assert job["state"] == "failed" and job["exit_code"] == 3
    out = api.alice.get(f"/v1/jobs/{job_id}/logs").json()["data"]
    assert str(tmp_path) in out and "hi there" in out
    err = api.alice.get(f"/v1/jobs/{job_id}/logs", params={"stream": "stderr"}).json()["data"]
    assert err == "oops\n"


def test_a_retried_submit_never_creates_a_second_job(api: Api) -> None:
    body = job_body(name="once", command=["sleep", "0.1"])
    headers = {"Idempotency-Key": "k-1"}
    first = api.alice.post("/v1/jobs", json=body, headers=headers)
    again = api.alice.post("/v1/jobs", json=body, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = api.alice.post("/v1/jobs", json=job_body(name="other"), headers=headers)
    assert other.status_code == 409
    names = [j["name"] for j in api.alice.get("/v1/jobs", params={"all": True}).json()]
    assert names == ["once"]
    # keys are per user: bob's identical key is a different request
    assert api.bob.post("/v1/jobs", json=body, headers=headers).status_code == 201


def test_cancel_stops_the_whole_process_group(api: Api) -> None:
    body = job_body(command=["sh", "-c", "sleep 60 & sleep 60 & wait"])
    job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
    api.wait(api.alice, job_id, {"running"})
    deadline = time.monotonic() + 10
    while not api.alice.get(f"/v1/jobs/{job_id}").json()["tasks"][0]["pid"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = api.alice.get(f"/v1/jobs/{job_id}").json()["tasks"][0]["pid"]
    children = psutil.Process(pid).children(recursive=True)
    assert api.alice.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    api.wait(api.alice, job_id, {"cancelled"})
    deadline = time.monotonic() + 10
    while api.alice.get(f"/v1/jobs/{job_id}").json()["tasks"][0]["state"] != "stopped":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    _gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive
    assert api.alice.post(f"/v1/jobs/{job_id}/cancel").status_code == 409


def test_a_task_that_ignores_sigterm_is_killed_after_the_grace_period(api: Api) -> None:
    body = job_body(command=["sh", "-c", "trap '' TERM; echo ready; sleep 60 & wait; sleep 60"])
    job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
    api.wait(api.alice, job_id, {"running"})
    # cancelled once it ignores SIGTERM (it says so), not before: on a busy machine a fixed
    # pause may end before the shell has set its trap
    deadline = time.monotonic() + 30
    while "ready" not in api.alice.get(f"/v1/jobs/{job_id}/logs").json()["data"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    api.alice.post(f"/v1/jobs/{job_id}/cancel")
    api.wait(api.alice, job_id, {"cancelled"})
    deadline = time.monotonic() + 10
    while (task := api.alice.get(f"/v1/jobs/{job_id}").json()["tasks"][0])["state"] != "stopped":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert task["exit_code"] == -9
    assert not psutil.pid_exists(task["pid"]) or psutil.Process(task["pid"]).status() == "zombie"


def test_maximum_runtime_is_enforced(api: Api) -> None:
    body = job_body(command=["sleep", "30"], max_runtime="0.5s")
    job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
    job = api.wait(api.alice, job_id, {"failed", "succeeded", "cancelled"})
    assert job["state"] == "failed"
    assert re.search("max(imum)? runtime", job["reason"])


def test_restart_policy_reruns_a_failed_job(api: Api) -> None:
    # fails on its first run, succeeds on its second
    body = job_body(
        command=["sh", "-c", 'test "$HETSCHED_RUN" -ge 2'],
        restart_policy="on_failure",
        max_restarts=2,
    )
    job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
    job = api.wait(api.alice, job_id, {"succeeded", "failed"})
    assert job["state"] == "succeeded" and job["restarts"] == 1 and job["run"] == 2


def test_a_pending_job_explains_itself(api: Api) -> None:
    hog = job_body(
        name="hog",
        command=["sleep", "30"],
        resources={
            "cpu": "1",
            "memory": "1Gi",
            "devices": [{"class": "gpu", "count": 2, "model": "A100"}],
        },
    )
    hog_id = api.alice.post("/v1/jobs", json=hog).json()["id"]
    api.wait(api.alice, hog_id, {"running"})
    waiting = api.alice.post("/v1/jobs", json={**hog, "name": "waits"}).json()["id"]
    deadline = time.monotonic() + 10
    while not (why := api.alice.get(f"/v1/jobs/{waiting}/why").json())["explanation"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert why["state"] == "pending"
    assert why["explanation"]["rejections"]
    api.alice.post(f"/v1/jobs/{hog_id}/cancel")
    assert api.wait(api.alice, waiting, {"running", "succeeded"})["state"] == "running"
    api.alice.post(f"/v1/jobs/{waiting}/cancel")
    api.wait(api.alice, waiting, {"cancelled"})


def test_nodes_and_queues(api: Api) -> None:
    nodes = {n["name"]: n for n in api.alice.get("/v1/nodes").json()}
    assert {"local", "gpu-node", "fpga-node"} <= set(nodes)
    assert [d["model"] for d in nodes["gpu-node"]["devices"]] == ["A100", "A100", "MI250"]
    queues = {q["name"]: q for q in api.alice.get("/v1/queues").json()}
    assert queues["team-a"]["users"] == ["alice", "admin"]
    assert queues["team-a"]["resources"]["gpu"]["quota"] == 2


def test_jobs_listing_filters_by_owner_and_state(api: Api) -> None:
    a = api.alice.post("/v1/jobs", json=job_body(name="mine")).json()["id"]
    b = api.bob.post("/v1/jobs", json=job_body(name="bobs")).json()["id"]
    api.wait(api.alice, a, {"succeeded"})
    api.wait(api.bob, b, {"succeeded"})
    assert [j["id"] for j in api.alice.get("/v1/jobs", params={"all": True}).json()] == [a]
    assert api.alice.get("/v1/jobs").json() == []
    everyone = {j["id"] for j in api.admin.get("/v1/jobs", params={"all": True}).json()}
    assert {a, b} <= everyone


def test_tokens_can_be_revoked(api: Api) -> None:
    made = api.admin.post("/v1/tokens", json={"user": "carol"}).json()
    carol = api.client(made["token"])
    assert carol.get("/v1/jobs").status_code == 200
    assert api.admin.delete(f"/v1/tokens/{made['id']}").status_code == 200
    assert carol.get("/v1/jobs").status_code == 401
    assert api.admin.delete(f"/v1/tokens/{made['id']}").status_code == 404


def test_the_admin_token_file_is_private(api: Api) -> None:
    path = api.svc.built.token_file
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert path.read_text().strip() == api.svc.admin_token
    home = path.parent
    assert os.stat(home).st_mode & 0o777 == 0o700


def test_openapi_and_health(api: Api) -> None:
    anonymous = api.client(None)
    health = anonymous.get("/healthz").json()
    assert health["ok"] is True and health["store"]["ok"] is True
    assert health["store"]["reason"] is None and health["store"]["failures"] == 0
    ready = anonymous.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    # the description needs a token unless the service runs with --public-docs
    assert anonymous.get("/openapi.json").status_code == 401
    spec = api.alice.get("/openapi.json").json()
    assert "/v1/jobs" in spec["paths"]


def test_queues_show_the_profile_quota_tree_with_usage(tmp_path: Path) -> None:
    profile = tmp_path / "profile.yaml"
    profile.write_text(
        "flavors: [gpu]\n"
        "queues:\n"
        "  - {name: org}\n"
        "  - {name: default, parent: org, nominal: {gpu: 1, cpu: 4}}\n"
    )
    with serving(service_options(tmp_path, profile=profile)) as api:
        gpus = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 2}]}
        body = job_body(command=["sleep", "30"], resources=gpus)
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        api.wait(api.alice, job_id, {"running"})
        deadline = time.monotonic() + 10
        while True:
            queues = {q["name"]: q for q in api.alice.get("/v1/queues").json()}
            if queues["default"]["resources"].get("gpu", {}).get("used"):
                break
            assert time.monotonic() < deadline, queues
            time.sleep(0.1)
        assert queues["default"]["quota_source"] == "profile"
        assert queues["default"]["resources"]["gpu"] == {
            "quota": 1.0,
            "used": 2.0,
            "borrowed": 1.0,
            "free": 0.0,
        }
        assert queues["org"]["resources"]["cpu"]["used"] == 1000.0
        api.alice.post(f"/v1/jobs/{job_id}/cancel")
