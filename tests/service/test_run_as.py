"""Jobs run as mapped OS users when the service runs as root, never as root."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
from service_fixtures import job_body, service_options, serving

from hetsched.service.server import build

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="--run-as needs the service as root")


def test_each_job_runs_as_its_mapped_account(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    options = service_options(tmp_path, run_as={"alice": "nobody"})
    with serving(options) as api:
        body = job_body(command=["sh", "-c", "id -u; id -G; pwd; exit 5"])
        job_id = api.alice.post("/v1/jobs", json=body).json()["id"]
        job = api.wait(api.alice, job_id, {"succeeded", "failed"})
        assert job["exit_code"] == 5  # recorded although the job cannot reach the home
        out = api.alice.get(f"/v1/jobs/{job_id}/logs").json()["data"].splitlines()
        assert out[1:3] == [str(nobody.pw_uid), str(nobody.pw_gid)]
        # bob has no account: refused, nothing stored
        answer = api.bob.post("/v1/jobs", json=job_body())
        assert answer.status_code == 403 and "OS account" in answer.text


def test_a_mapping_to_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="never run as root"):
        build(service_options(tmp_path, run_as={"alice": "root"}))
