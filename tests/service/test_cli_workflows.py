"""``hetsched submit --after/--array``, ``job`` with an array's counts, ``cancel ID[7]`` and
``check`` on a file with a cycle, against the real service."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import yaml
from service_fixtures import Api
from typer.testing import CliRunner

from hetsched.cli.main import app


def _run(api: Api, *args: str) -> tuple[int, str]:
    env = {"HETSCHED_URL": api.url, "HETSCHED_TOKEN": api.tokens["alice"], "COLUMNS": "200"}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout + result.stderr


def test_submit_flags_make_an_array_and_a_dependent(api: Api, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    wait = f"until test -e {flag}; do sleep 0.05; done"
    code, out = _run(api, "submit", "--name", "sweep", "--array", "0-5:5%1", "--", "sh", "-c", wait)
    assert code == 0, out
    sweep = out.split()[1]
    code, out = _run(api, "submit", "--name", "report", "--after", "sweep:ended", "--", "true")
    assert code == 0, out
    report = out.split()[1]
    row = api.alice.get(f"/v1/jobs/{report}").json()
    assert row["after"] == [{"job": sweep, "state": "ended"}]
    code, out = _run(api, "cancel", f"{sweep}[5]")
    assert code == 0 and f"cancel requested for {sweep}[5]" in out
    flag.touch()
    api.wait(api.alice, report, {"succeeded"})
    code, out = _run(api, "job", sweep)
    assert code == 0, out
    assert "0-5:5%1: 2 elements: 1 cancelled, 1 succeeded" in out
    assert "failed  5" in out
    code, out = _run(api, "submit", "--after", "sweep:done", "--", "true")
    assert code == 2 and "the state is succeeded, failed or ended, got 'done'" in out


def test_check_names_the_cycle_in_a_jobs_file(api: Api, tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    jobs = [{"name": "a", "after": ["b"]}, {"name": "b", "after": ["a"]}]
    path.write_text(yaml.safe_dump({"jobs": jobs}))
    code, out = _run(api, "check", str(path))
    assert code == 2 and "dependency cycle: a -> b -> a" in out


def test_the_pipeline_example_runs_in_order(api: Api) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "pipeline.yaml"
    code, out = _run(api, "submit", "-o", "json", str(example))
    assert code == 0, out
    ids = {row["name"]: row["id"] for row in json.loads(out)}
    report = api.wait(api.alice, ids["report"], {"succeeded", "cancelled"}, timeout=60)
    assert report["state"] == "succeeded"
    rows = {n: api.alice.get(f"/v1/jobs/{i}").json() for n, i in ids.items()}
    assert rows["sweep"]["elements"]["counts"] == {"succeeded": 10}
    order = ["preprocess", "train", "sweep", "report"]
    for before, after in itertools.pairwise(order):
        assert rows[after]["first_started_at"] >= rows[before]["ended_at"]
