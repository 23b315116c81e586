"""A loop turn that fails is not retried blindly: the loop raises an alert, holds back the
jobs the turn concerned, rebuilds the core from the store and keeps scheduling every other
job; a job that turns keep failing on is given up (it fails, so every job ends). And a
store that the core cannot be made to agree with stops the service from scheduling."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from service_fixtures import Api, job_body, service_options

from builders import gpu_node, job
from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.cluster.state import ClusterState
from hetsched.controlplane.recovery import RecoveryError, disagreements
from hetsched.keys import TaskKey
from hetsched.scheduler import Scheduler
from hetsched.service.server import build
from hetsched.service.testing import running

MI250 = {"cpu": "1", "memory": "256Mi", "devices": [{"class": "gpu", "model": "MI250"}]}
TERMINAL = {"succeeded", "failed", "cancelled", "rejected"}


def _failures(api: Api) -> float:
    text = api.admin.get("/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("hetsched_loop_turn_failures_total"))
    return float(line.split()[-1])


def test_a_turn_failing_on_one_job_holds_it_and_schedules_the_rest(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    with running(options) as svc:
        api = Api(svc)
        _refuse_device(api, options.home, "MI250")
        doomed = api.alice.post("/v1/jobs", json=job_body(name="doomed", resources=MI250))
        doomed_id = doomed.json()["id"]
        job = api.wait(api.alice, doomed_id, TERMINAL, timeout=120)
        assert job["state"] == "failed"
        assert "scheduling turns failed on it" in job["reason"]
        # jobs the failures did not concern ran meanwhile and after
        others = [
            api.bob.post("/v1/jobs", json=job_body(name=f"other-{i}")).json()["id"]
            for i in range(3)
        ]
        for job_id in others:
            assert api.wait(api.bob, job_id, TERMINAL)["state"] == "succeeded"
        # three strikes, then given up: the failures are bounded, not one per tick
        assert _failures(api) == 3
        alerts = api.admin.get("/v1/alerts").json()
        kinds = [a["kind"] for a in alerts["loop"]]
        assert kinds.count("turn_failed") == 3 and kinds[-1] == "gave_up"
        assert all(doomed_id in a["jobs"] for a in alerts["loop"])
        assert "injected" in alerts["loop"][0]["message"]
        assert alerts["wedged"] is None and alerts["held"] == {}
        # given up, no longer held: the alerts still name it for the banners
        assert alerts["jobs"] == {doomed_id: {"name": "doomed", "user": "alice"}}
        api.close()


def _refuse_device(api: Api, home: Path, model: str) -> None:
    """Make the store refuse every allocation of the device of ``model``: the turn that
    starts a job wanting it fails at its commit, however often it is tried."""
    nodes = api.admin.get("/v1/nodes").json()
    device = next(d["id"] for n in nodes for d in n["devices"] if d["model"] == model)
    db = sqlite3.connect(home / "hetsched.db")
    with db:
        db.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON allocations "
            f"WHEN NEW.device_id = '{device}' BEGIN SELECT RAISE(ABORT, 'injected'); END"
        )
    db.close()


def test_a_job_that_turns_fail_on_can_be_cancelled(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    with running(options) as svc:
        api = Api(svc)
        _refuse_device(api, options.home, "MI250")
        job_id = api.alice.post("/v1/jobs", json=job_body(resources=MI250)).json()["id"]
        deadline = time.monotonic() + 60
        while _failures(api) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert api.alice.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        job = api.wait(api.alice, job_id, TERMINAL)
        assert job["state"] == "cancelled"
        assert api.admin.get("/v1/alerts").json()["held"] == {}
        api.close()


def test_a_store_the_core_cannot_agree_with_stops_the_start(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    gpu = {"cpu": "1", "memory": "256Mi", "devices": [{"class": "gpu", "model": "A100"}]}
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        job_id = api.alice.post(
            "/v1/jobs", json=job_body(command=["sleep", "30"], resources=gpu)
        ).json()["id"]
        api.wait(api.alice, job_id, {"running"})
        deadline = time.monotonic() + 20
        while not api.alice.get(f"/v1/jobs/{job_id}").json()["tasks"][0]["pid"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        api.close()
    # the running task's allocation row vanishes: the restored core would hold a device
    # the store says is free
    db = sqlite3.connect(options.home / "hetsched.db")
    with db:
        db.execute("DELETE FROM allocations")
    db.close()
    try:
        with pytest.raises(RecoveryError, match="disagree on what is allocated") as caught:
            build(options)
        assert f"task {job_id}/0#1" in str(caught.value)
    finally:
        from hetsched.agent.executor import Executor

        instance = (options.home / "instance").read_text().strip()
        Executor(options.home, instance).sweep(())


def _row(job: str, device: str, share: int = 1000, task: int = 0, run: int = 1) -> dict:
    return {"job_id": job, "task": task, "run": run, "device_id": device, "share": share}


def _core_holding(*held: tuple[str, str, int]) -> Scheduler:
    core = Scheduler(ClusterState([gpu_node("n", gpus=2)]))
    for job_id, device, share in held:
        placement = Placement("n", 1000, 1024, (DeviceShare(device, share),))
        core.allocate(TaskKey(job_id, 0, 1), placement, job(job_id, gpus=1, share=share))
    return core


#: (store rows, core allocations (job, device, share), expected disagreements)
AGREEMENT: list[tuple[list[dict], list[tuple[str, str, int]], list[str]]] = [
    ([], [], []),
    ([_row("a", "n/gpu0")], [("a", "n/gpu0", 1000)], []),
    (
        [_row("a", "n/gpu0", 500), _row("b", "n/gpu0", 500)],
        [("a", "n/gpu0", 500), ("b", "n/gpu0", 500)],
        [],
    ),
    (
        # fault 1: the store holds a device the core believes free
        [_row("a", "n/gpu0")],
        [],
        ["device n/gpu0: the store holds 1000/1000, the core 0/1000", "task a/0#1: "],
    ),
    (
        [],
        [("a", "n/gpu1", 1000)],
        ["device n/gpu1: the store holds 0/1000, the core 1000/1000", "task a/0#1: "],
    ),
    (
        # the same share on each device, held by different tasks
        [_row("a", "n/gpu0", 500)],
        [("b", "n/gpu0", 500)],
        ["task a/0#1: ", "task b/0#1: "],
    ),
]


@pytest.mark.parametrize(("rows", "held", "expected"), AGREEMENT)
def test_disagreements_between_store_and_core(
    rows: list[dict], held: list[tuple[str, str, int]], expected: list[str]
) -> None:
    found = disagreements(rows, _core_holding(*held))
    assert len(found) == len(expected), found
    for line, start in zip(found, expected, strict=True):
        assert line.startswith(start), (line, start)
