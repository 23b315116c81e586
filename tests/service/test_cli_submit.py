"""``hetsched submit``: a file of many jobs goes as batches, one command as one job, against
the real service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from service_fixtures import Api, job_body
from typer.testing import CliRunner

from hetsched.cli import submit as jobs_cli
from hetsched.cli.main import app


def _submit(api: Api, path: Path, token: str) -> tuple[int, str]:
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": token}
    result = CliRunner().invoke(app, ["submit", "-o", "json", str(path)], env=env)
    return result.exit_code, result.stdout + result.stderr


def _count(api: Api) -> int:
    return len(api.admin.get("/v1/jobs", params={"all": True}).json())


def test_a_jobs_file_is_submitted_as_one_batch(api: Api, tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump({"jobs": [job_body(name=f"f{i}") for i in range(4)]}))
    code, out = _submit(api, path, api.tokens["alice"])
    assert code == 0, out
    assert [j["name"] for j in json.loads(out)] == ["f0", "f1", "f2", "f3"], out
    assert _count(api) == 4


def test_one_refused_job_refuses_the_file_and_names_its_index(api: Api, tmp_path: Path) -> None:
    bad = job_body(name="bad", resources={"cpu": "1", "memory": "99Ti"})
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump({"jobs": [job_body(name="ok"), bad, job_body(name="ok2")]}))
    code, out = _submit(api, path, api.tokens["alice"])
    assert code == 2  # invalid input, the exit code `check` gives a file it refuses
    assert "jobs[1]" in out and "nothing was stored" in out
    assert _count(api) == 0


def test_check_and_submit_refuse_an_invalid_job_alike(api: Api, tmp_path: Path) -> None:
    bad = job_body(name="bad", resources={"cpu": "lots", "memory": "1Gi"})
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump({"jobs": [job_body(name="ok"), bad]}))
    code, out = _submit(api, path, api.tokens["alice"])
    assert code == 2 and "jobs[1].resources.cpu" in out, out
    checked = CliRunner().invoke(app, ["check", str(path)])
    assert checked.exit_code == 2 and "jobs[1].resources.cpu" in checked.output
    assert _count(api) == 0


def test_a_large_file_goes_in_several_batches(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_cli, "_BATCH_JOBS", 2)
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": [job_body(name=f"m{i}") for i in range(5)]}))
    code, out = _submit(api, path, api.tokens["bob"])
    assert code == 0, out
    assert [j["name"] for j in json.loads(out)] == [f"m{i}" for i in range(5)]
    assert [len(b) for b in jobs_cli._batches([job_body()] * 5)] == [2, 2, 1]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ([], {"cpu": "1", "memory": "1Gi"}),
        (["--gpu", "2"], {"devices": [{"class": "gpu", "count": 2}]}),
        (
            ["--cpu", "500m", "--memory", "2Gi", "--gpu-share", "300", "--gpu-model", "A100"],
            {
                "cpu": "500m",
                "memory": "2Gi",
                "devices": [{"class": "gpu", "count": 1, "share": 300, "model": ["A100"]}],
            },
        ),
        (
            ["--fpga", "1"],
            {
                "cpu": "1",
                "memory": "1Gi",
                "devices": [{"class": "fpga", "count": 1}],
                "tolerations": [{"key": "dedicated"}],
            },
        ),
    ],
)
def test_one_command_is_submitted_with_its_resources(
    api: Api, options: list[str], expected: dict[str, object]
) -> None:
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": api.tokens["alice"]}
    args = ["submit", "-o", "json", *options, "-e", "K=V", "--", "true"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    (job,) = json.loads(result.stdout)
    assert job["command"] == ["true"] and job["name"] == "true"
    resources = {k: v for k, v in job["resources"].items() if k in expected}
    assert resources == expected, job["resources"]


@pytest.mark.parametrize("options", [["-o", "json"], ["--output", "json"], ["--output=json"]])
def test_options_after_a_jobs_file_leave_it_a_jobs_file(
    api: Api, tmp_path: Path, options: list[str]
) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(job_body(name="from-file")))
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": api.tokens["alice"]}
    result = CliRunner().invoke(app, ["submit", str(path), *options], env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    (job,) = json.loads(result.stdout)
    assert job["name"] == "from-file" and job["command"] != [str(path), *options]
