"""``hetsched up`` as a federation's member: leases, fenced jobs, what-if (real service,
real HTTP, real processes).

A job sent with ``federation`` runs only while that federation's lease is live: when the
federation stops renewing, the service cancels the job; when the service itself is gone,
the task's own watchdog kills it; a restart after the lapse does not start it again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from service_fixtures import Api, job_body, service_options

from hetsched.service.testing import running

LEASE_S = 2.0


class Federation:
    """The federation's half of the protocol, by hand: renew by nonce, read job states."""

    def __init__(self, client: httpx.Client, name: str = "fed") -> None:
        self.client = client
        self.name = name
        self.nonce: str | None = None

    def renew(self, jobs: list[str] | None = None) -> dict[str, Any]:
        answer = self.client.post(
            "/v1/federation/lease",
            json={
                "federation": self.name,
                "lease_s": LEASE_S,
                "nonce": self.nonce,
                "jobs": jobs or [],
            },
        )
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        self.nonce = body["nonce"]
        return body

    def establish(self) -> None:
        self.renew()
        assert self.renew()["renewed"]


def _wait(what: str, check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _pid_of(path: Path) -> int:
    return int(_wait(f"{path} to be written", lambda: path.exists() and path.read_text().strip()))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _sleeper(tmp_path: Path, name: str = "fenced") -> dict[str, Any]:
    """A federated job whose process writes its pid and then sleeps."""
    pidfile = tmp_path / f"{name}.pid"
    return job_body(
        name=name,
        federation="fed",
        command=["sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"],
    )


def test_a_federated_job_needs_a_live_lease(api: Api) -> None:
    body = job_body(federation="fed")
    refused = api.admin.post("/v1/jobs", json=body)
    assert refused.status_code == 409 and "no live lease" in refused.text
    fed = Federation(api.admin)
    first = fed.renew()
    assert (first["renewed"], first["live"]) == (False, False)
    assert api.admin.post("/v1/jobs", json=body).status_code == 409
    assert fed.renew()["renewed"]
    job_id = api.admin.post("/v1/jobs", json=body).json()["id"]
    api.wait(api.admin, job_id, {"succeeded"})
    report = fed.renew([job_id, "j-unknown"])
    assert [(j["id"], j["state"], j["fenced"]) for j in report["jobs"]] == [
        (job_id, "succeeded", False)
    ]
    assert {n["name"] for n in report["nodes"]} >= {"gpu-node", "fpga-node"}
    assert report["fence_after_s"] >= 3


def test_the_lease_reports_only_the_federations_own_jobs(api: Api) -> None:
    mine = api.alice.post("/v1/jobs", json=job_body()).json()["id"]
    report = Federation(api.admin).renew([mine])
    assert report["jobs"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"federation": "../x", "lease_s": 5.0}, "federation"),
        ({"federation": "fed", "lease_s": 0.0}, "lease_s"),
        ({"federation": "fed", "lease_s": "5"}, "lease_s"),
        ({"federation": "fed", "lease_s": 5.0, "extra": 1}, "extra"),
        ({"federation": "fed", "lease_s": 5.0, "jobs": ["x" * 65]}, "jobs.0"),
    ],
)
def test_bad_renewals_name_the_field(api: Api, body: dict[str, Any], field: str) -> None:
    answer = api.admin.post("/v1/federation/lease", json=body)
    assert answer.status_code == 422
    assert any(e.startswith(field) for e in answer.json()["errors"]), answer.text


def test_whatif_answers_now_later_never_and_stores_nothing(api: Api) -> None:
    gpu = {"cpu": "1", "memory": "1Gi", "devices": [{"class": "gpu", "model": "A100"}]}
    held = job_body(
        command=["sleep", "30"], resources={**gpu, "devices": [{"class": "gpu", "count": 2}]}
    )
    held["estimated_runtime"] = "60s"
    held["resources"]["devices"][0]["model"] = "A100"
    running_id = api.admin.post("/v1/jobs", json=held).json()["id"]
    api.wait(api.admin, running_id, {"running"})
    before = len(api.admin.get("/v1/jobs", params={"all": True}).json())
    probes = {
        "jobs": [
            job_body(resources={"cpu": "1", "memory": "1Gi"}),
            job_body(resources=gpu),
            job_body(resources={**gpu, "devices": [{"class": "gpu", "count": 8}]}),
        ]
    }
    answer = api.alice.post("/v1/whatif", json=probes)
    assert answer.status_code == 200, answer.text
    now, later, never = answer.json()["answers"]
    assert now["fits_now"] and now["start_in_s"] == 0
    assert not later["fits_now"] and later["fits_ever"]
    assert 0 < later["start_in_s"] <= 60 and later["finishing"] == [running_id]
    assert not never["fits_ever"] and never["reason"].startswith("never")
    assert len(api.admin.get("/v1/jobs", params={"all": True}).json()) == before
    bad = api.alice.post("/v1/whatif", json={"jobs": [{"name": "x"}]})
    assert bad.status_code == 422 and "jobs[0].command" in bad.text
    api.admin.post(f"/v1/jobs/{running_id}/cancel")


def test_a_lapsed_lease_cancels_its_jobs_and_they_never_start_again(tmp_path: Path) -> None:
    options = service_options(tmp_path)
    with running(options) as svc:
        api = Api(svc)
        fed = Federation(api.admin)
        fed.establish()
        job_id = api.admin.post("/v1/jobs", json=_sleeper(tmp_path)).json()["id"]
        pid = _pid_of(tmp_path / "fenced.pid")
        # the federation goes silent: the service cancels the job at the expiry
        job = api.wait(api.admin, job_id, {"cancelled", "failed"}, timeout=LEASE_S + 15)
        assert job["state"] == "cancelled" and job["reason"].startswith("fenced")
        assert "federation fed" in job["reason"] and "(lapse 1)" in job["reason"], job
        _wait("the task to be gone", lambda: not _alive(pid))
        # the federation comes back: told of the lapse, the job reported fenced
        report = fed.renew([job_id])
        assert report["lapses"] == 1
        assert [(j["state"], j["fenced"]) for j in report["jobs"]] == [("cancelled", True)]
        # once nothing of the old lease runs (its task recorded stopped), renewed again
        _wait("a renewal", lambda: fed.renew()["renewed"])
        api.close()
    # a restart does not start it again
    with running(options) as svc:
        api = Api(svc)
        time.sleep(1.0)
        job = api.admin.get(f"/v1/jobs/{job_id}").json()
        assert job["state"] == "cancelled" and job["run"] == 1
        api.close()


def test_the_tasks_watchdog_kills_it_when_the_service_is_gone(tmp_path: Path) -> None:
    """The service stops without stopping its tasks (as after a crash): no one renews or
    cancels, yet the task dies once its lease and backstop have passed; the next start
    finds the lapse and leaves the job ended, reported fenced."""
    options = service_options(tmp_path)
    with running(options, keep_tasks=True) as svc:
        api = Api(svc)
        fed = Federation(api.admin)
        fed.establish()
        job_id = api.admin.post("/v1/jobs", json=_sleeper(tmp_path)).json()["id"]
        pid = _pid_of(tmp_path / "fenced.pid")
        api.close()
    lease_file = options.home / "fencing" / "fed.lease"
    expiry = int(lease_file.read_text().splitlines()[0])
    backstop = 3  # kill grace 1 s, rounded up, plus 2
    _wait("the watchdog to kill the task", lambda: not _alive(pid), timeout=LEASE_S + 20)
    # never before the lease and its backstop ran out
    assert time.time() >= expiry + backstop
    with running(options) as svc:
        api = Api(svc)
        job = api.wait(api.admin, job_id, {"cancelled", "failed"})
        assert job["run"] == 1
        # the job's end names the lease that fenced it and its lapse, not only how its
        # process ended ("lost: its process was gone after a restart", "killed by signal 9")
        assert "fenced: the lease of federation fed lapsed here (lapse 1, at " in job["reason"]
        report = Federation(api.admin).renew([job_id])
        assert report["jobs"][0]["fenced"] and report["lapses"] == 1
        api.close()
    # no second run wrote its pid
    assert int((tmp_path / "fenced.pid").read_text()) == pid
