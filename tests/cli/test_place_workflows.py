"""``hetsched place`` on jobs that wait for others and on an array: one pass places what may
run (the array's elements, within its cap) and lists each waiting job once, with what it
waits for."""

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from hetsched.cli.main import app


def test_one_pass_over_a_dependency_and_an_array(examples: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    one = {"cpu": "1", "memory": "1Gi"}
    jobs.write_text(
        yaml.safe_dump(
            {
                "jobs": [
                    {"name": "a", "resources": one},
                    {"name": "b", "after": ["a"], "resources": one},
                    {"name": "s", "array": "0-9%3", "resources": one},
                ]
            }
        )
    )
    cluster = str(examples / "clusters" / "mixed.yaml")
    result = CliRunner().invoke(
        app, ["place", "--cluster", cluster, "--jobs", str(jobs), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [p["job"] for p in doc["placements"]] == ["a", "s[0]", "s[1]", "s[2]"]
    assert [(p["job"], p["reasons"]) for p in doc["pending"]] == [
        ("b", ["waiting for a (running)"])
    ]


def test_check_refuses_what_submit_refuses_of_a_files_dependencies(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"

    def check(jobs: list[dict[str, object]]) -> tuple[int, str]:
        for job in jobs:
            job.update(command=["true"], resources={"cpu": "1"})
        path.write_text(yaml.safe_dump({"jobs": jobs}))
        result = CliRunner().invoke(app, ["check", str(path), "-o", "json"])
        return result.exit_code, result.output

    code, out = check([{"name": n, "after": [w]} for n, w in ("ac", "ba", "cb")])
    assert code == 2
    assert json.loads(out)["errors"] == ["jobs: dependency cycle: a -> c -> b -> a"]
    # two jobs named etl: which one report waits for is not said (submit refuses it too)
    code, out = check([{"name": "etl"}, {"name": "etl"}, {"name": "report", "after": ["etl"]}])
    assert code == 2
    assert json.loads(out)["errors"] == [
        "jobs[2].after[0]: 2 jobs of this submission are named 'etl'"
    ]
    code, out = check([{"name": "etl"}, {"name": "report", "after": ["etl"]}])
    assert code == 0 and json.loads(out)["valid"] is True
