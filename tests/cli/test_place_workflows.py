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
