"""The checkpoint protocol end to end: the real service, real processes, the example
training script. Preempted after step k >= 1, its next run starts at step k (its log says
so) and it loses less than one checkpoint interval; the same when its device is unplugged
(policy ``checkpoint``). Reports through the file and through ``hetsched checkpoint``;
task tokens."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_fixtures import Api, service_options

from agent.sysfs import SysfsTree
from builders import EXAMPLES
from hetsched.keys import TaskKey
from hetsched.service.testing import Running, running

SCRIPT_DIR = EXAMPLES / "jobs" / "checkpointing"
#: the script saves every 5 steps of 0.1 s: about every 0.5 s; the job declares 2 s
INTERVAL_S = 2.0
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


def _train(report: str = "file", policy: str = "requeue", **resources: Any) -> dict[str, Any]:
    return {
        "name": "train",
        "priority": 0,
        "on_device_failure": policy,
        "checkpoint": {"interval_s": f"{INTERVAL_S:g}s", "notice_s": "20s"},
        "resources": {**GPU, **resources},
        "workdir": str(SCRIPT_DIR),
        "command": [
            *(sys.executable, "train.py", "--steps", "40", "--every", "5"),
            *("--step-s", "0.1", "--report", report),
        ],
    }


def _until(api: Api, job_id: str, check: Any, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = api.alice.get(f"/v1/jobs/{job_id}").json()
        if check(job):
            return job  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def _log(api: Api, job_id: str) -> str:
    return str(api.alice.get(f"/v1/jobs/{job_id}/logs").json()["data"])


def _runs(log: str) -> list[str]:
    """The log of each run (the executor writes a header before each)."""
    return [part for part in re.split(r"--- hetsched: run \d+ of task 0 on .* ---\n", log) if part]


def _metrics(api: Api) -> dict[str, float]:
    """The checkpoint counters of /metrics, summed over their labels."""
    names = {"hetsched_checkpoints_total", "hetsched_lost_work_seconds_total"}
    out = dict.fromkeys(names, 0.0)
    for family in text_string_to_metric_families(api.admin.get("/metrics").text):
        for sample in family.samples:
            if sample.name in names:
                out[sample.name] += sample.value
    return out


def _saved(job: dict[str, Any]) -> int:
    return int(job["checkpoint"]["step"]) if job.get("checkpoint") else -1


def _service(tmp_path: Path, **overrides: Any) -> Any:
    cluster = tmp_path / "gpu.yaml"
    cluster.write_text(CLUSTER)
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE)
    values: dict[str, Any] = {"cluster": [cluster], "profile": profile}
    values.update(overrides)
    return running(service_options(tmp_path, **values))


@pytest.mark.parametrize("report", ["file", "cli"])
def test_a_preempted_training_job_resumes_at_the_step_it_saved(tmp_path: Path, report: str) -> None:
    with _service(tmp_path) as svc:
        api = Api(svc)
        try:
            job_id = api.alice.post("/v1/jobs", json=_train(report)).json()["id"]
            job = _until(api, job_id, lambda j: _saved(j) >= 5)
            assert job["checkpoint"]["run"] == 1 and job["checkpoint"]["path"].endswith(".npz")
            urgent = {"name": "urgent", "priority": 10, "resources": GPU, "command": ["true"]}
            asked = time.monotonic()
            urgent_id = api.alice.post("/v1/jobs", json=urgent).json()["id"]
            _until(api, urgent_id, lambda j: j["first_started_at"] is not None)
            # the script saved on its notice: the wait ended long before the 20 s notice
            assert time.monotonic() - asked < 15
            job = api.wait(api.alice, job_id, {"succeeded", "failed"}, timeout=120)
            assert job["state"] == "succeeded" and job["preemptions"] == 1

            log = _log(api, job_id)
            first, second = _runs(log)
            assert first.startswith("starting at step 0 (from scratch)"), log
            saved = int(re.findall(r"notice received: saved at step (\d+)", first)[0])
            assert saved >= 5
            assert second.startswith(f"starting at step {saved} (resuming from ")
            assert job["lost_work_s"] < INTERVAL_S
            why = api.alice.get(f"/v1/jobs/{job_id}/why").json()
            causes = [h["cause"] for h in why["history"]]
            assert any("gets a 20s notice to checkpoint" in c for c in causes)
            assert why["lost_work_s"] == job["lost_work_s"]
            metrics = _metrics(api)
            assert metrics["hetsched_checkpoints_total"] >= 2  # a periodic one, the notice's
            assert metrics["hetsched_lost_work_seconds_total"] == pytest.approx(job["lost_work_s"])
        finally:
            api.close()


ADDRESSES = ("0000:1b:00.0", "0000:1c:00.0")


def test_a_training_job_whose_gpu_is_unplugged_resumes_from_its_last_checkpoint(
    tmp_path: Path,
) -> None:
    sysfs = SysfsTree(tmp_path / "sys")
    for address in ADDRESSES:
        sysfs.pci(address, 0x10DE, 0x2330, 0x030200, numa=0)
    options: dict[str, Any] = {
        "device_backends": ["cpu", "pci"],
        "sysfs_root": tmp_path / "sys",
        "watch_interval_s": 0.1,
        "cluster": [],
    }
    with running(service_options(tmp_path, **options)) as svc:
        api = Api(svc)
        try:
            body = _train(policy="checkpoint", devices=[{"class": "gpu", "count": 1}])
            job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
            job = _until(api, job_id, lambda j: _saved(j) >= 5 and j["state"] == "running")
            (task,) = [t for t in job["tasks"] if t["run"] == 1]
            device = task["devices"][0]["id"]
            sysfs.unplug(ADDRESSES[int(device[-1])])
            job = api.wait(api.alice, job_id, {"succeeded", "failed"}, timeout=120)
            assert job["state"] == "succeeded" and job["run"] == 2

            first, second = _runs(_log(api, job_id))
            # no notice for a lost device: it resumes from its last periodic checkpoint
            last = int(re.findall(r"step (\d+): loss [0-9.]+, saved", first)[-1])
            assert last >= 5 and "notice received" not in first
            assert second.startswith(f"starting at step {last} (resuming from ")
            assert job["lost_work_s"] < INTERVAL_S
            causes = [h["cause"] for h in api.alice.get(f"/v1/jobs/{job_id}/why").json()["history"]]
            assert any("resumes from its checkpoint of" in c for c in causes)
        finally:
            api.close()


def _task_token(svc: Running, key: TaskKey) -> str:
    protocol = svc.built.service.loop.checkpoints
    assert protocol is not None
    return protocol.tokens.issue(key)


@pytest.mark.parametrize(
    ("body", "token_for", "status"),
    [
        ({"task": "j/0#1", "step": 3}, "j/0#1", 202),
        ({"task": "j/0#1", "step": 3, "path": "/x"}, "j/0#1", 202),
        # another task's token, a user's token, none
        ({"task": "j/0#1", "step": 3}, "j/0#2", 401),
        ({"task": "j/0#1", "step": 3}, "user", 401),
        ({"task": "j/0#1", "step": 3}, "", 401),
        # bad bodies
        ({"task": "j/0#1", "step": -1}, "j/0#1", 422),
        ({"task": "j/0#1", "step": "3"}, "j/0#1", 422),
        ({"task": "j/0", "step": 3}, "j/0#1", 422),
        ({"task": "j/0#1", "step": 3, "extra": 1}, "j/0#1", 422),
        ({"task": "j/0#1", "step": 3, "path": "a\x00b"}, "j/0#1", 422),
    ],
)
def test_checkpoint_reports_take_the_tasks_own_token(
    tmp_path: Path, body: dict[str, Any], token_for: str, status: int
) -> None:
    with running(service_options(tmp_path)) as svc:
        api = Api(svc)
        try:
            if token_for == "user":
                token = api.tokens["alice"]
            elif token_for:
                token = _task_token(svc, TaskKey.parse(token_for))
            else:
                token = ""
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            answer = httpx.post(f"{svc.url}/v1/checkpoints", json=body, headers=headers)
            assert answer.status_code == status, answer.text
            # a task token is nobody's user token
            if token_for.startswith("j/"):
                refused = httpx.get(f"{svc.url}/v1/jobs", headers=headers)
                assert refused.status_code == 401
        finally:
            api.close()
