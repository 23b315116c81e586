"""Nodes joining and leaving while the service runs (what a Ray cluster's inventory reports):
a node that joins takes work with its devices, and a node change the core has already (a
node added twice, a node removed that it never had) changes nothing and fails no turn."""

from __future__ import annotations

import time
from pathlib import Path

from service_fixtures import Api, job_body, service_options

from hetsched.model.device import Device, Node
from hetsched.scheduler import NodeAdded, NodeRemoved
from hetsched.service.testing import running

TWO_A100 = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "count": 2, "model": "A100"}]}


def _running(api: Api, job_id: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        job = api.admin.get(f"/v1/jobs/{job_id}").json()
        if any(t["state"] == "running" for t in job.get("tasks", [])):
            return job  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def test_a_node_that_joins_takes_work_and_repeated_node_events_change_nothing(
    tmp_path: Path,
) -> None:
    with running(service_options(tmp_path)) as svc:
        api = Api(svc)
        loop = svc.built.service.loop
        hog = api.alice.post("/v1/jobs", json=job_body(command=["sleep", "30"], resources=TWO_A100))
        _running(api, hog.json()["id"])
        gpus = tuple(Device(f"extra/gpu{i}", "gpu", "nvidia", "A100") for i in range(2))
        extra = Node("extra", 4000, 8192, gpus)
        loop.device_events([NodeAdded(extra)])
        # said again (a node that joined while the core was rebuilt), and a node never known
        loop.device_events([NodeAdded(extra), NodeRemoved("nowhere", "Ray node died")])
        body = job_body(
            command=["sh", "-c", "echo $CUDA_VISIBLE_DEVICES $HETSCHED_NODE"], resources=TWO_A100
        )
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        job = api.wait(api.alice, job_id, {"succeeded", "failed"})
        assert job["state"] == "succeeded"
        assert [t["node"] for t in job["tasks"]] == ["extra"]
        log = api.alice.get(f"/v1/jobs/{job_id}/logs").json()["data"]
        assert log.splitlines()[-1] == "0,1 extra"
        assert loop.metrics.failures._value.get() == 0
        # the node view is refreshed by the loop every half second
        deadline = time.monotonic() + 10
        while "extra" not in (names := [n["name"] for n in api.admin.get("/v1/nodes").json()]):
            assert time.monotonic() < deadline, names
            time.sleep(0.1)
        assert names.count("extra") == 1 and "nowhere" not in names
        api.close()
