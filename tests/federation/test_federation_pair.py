"""A standby pair of federation front-ends: two `hetsched federation up --lease` on one
PostgreSQL and one home, in front of a `hetsched up` member. The leader SIGKILLed while a
job runs on the member: the standby takes over, rejoins the member within the
federation's lease there, and the job ends succeeded, sent to the member once and run
once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fed_fixtures import job_body, members_yaml
from procs import FederationProcess, MemberProcess

from pg_fixture import new_database
from waiting import until as _until

pytestmark = pytest.mark.slow


@pytest.fixture
def db(postgres_url: str) -> str:
    return new_database(postgres_url, "fedpair")


@pytest.fixture
def member(tmp_path: Path) -> Iterator[MemberProcess]:
    proc = MemberProcess(tmp_path, "a")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _health(url: str) -> dict[str, Any]:
    try:
        answer: dict[str, Any] = httpx.get(f"{url}/healthz", timeout=2).json()
        return answer
    except (httpx.HTTPError, ValueError):
        return {}


def _leads(url: str) -> bool:
    health = _health(url)
    return bool(health.get("ok")) and health.get("role") != "standby"


def test_the_standby_federation_takes_over_and_the_job_runs_once(
    tmp_path: Path, db: str, member: MemberProcess
) -> None:
    # the member keeps the federation's jobs for 30 s without word from it: longer than a
    # takeover
    members = members_yaml(tmp_path, {"a": member.url}, {"a": member.token}, lease=30.0)
    options = {"db": db, "lease": "cp", "lease_s": "4"}
    first = FederationProcess(tmp_path, members, "fed", **options)
    second = FederationProcess(tmp_path, members, "fed", **options)
    try:
        first.start()
        _until("the first leads", lambda: _leads(first.url))
        second.start()
        assert _health(second.url) == {"ok": True, "role": "standby", "leader": first.url}
        marks, gate = tmp_path / "marks", tmp_path / "gate"
        script = f"echo start >> {marks}; while [ ! -e {gate} ]; do sleep 0.1; done"
        headers = {"Authorization": f"Bearer {first.token}"}
        body = job_body(command=["sh", "-c", script])
        answer = httpx.post(f"{first.url}/v1/jobs", json=body, headers=headers, timeout=30)
        assert answer.status_code == 201, answer.text
        job_id = answer.json()["id"]
        _until("the job runs on the member", marks.exists)
        first.kill()
        _until("the second leads", lambda: _leads(second.url), timeout_s=60)
        gate.touch()

        def ended() -> dict[str, Any] | None:
            job: dict[str, Any] = httpx.get(
                f"{second.url}/v1/jobs/{job_id}", headers=headers, timeout=10
            ).json()
            return job if job["state"] in {"succeeded", "failed", "cancelled"} else None

        job = _until("the job ends", ended, timeout_s=90)
    finally:
        second.stop()
        first.stop()
    assert job["state"] == "succeeded", job
    assert marks.read_text().split() == ["start"]  # run once
    at_member = httpx.get(
        f"{member.url}/v1/jobs",
        params={"all": True},
        headers={"Authorization": f"Bearer {member.token}"},
        timeout=10,
    ).json()
    assert len(at_member) == 1, at_member  # sent once
