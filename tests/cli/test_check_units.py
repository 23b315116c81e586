"""``hetsched check`` prints quantities as the files write them (``cpu: 16``,
``memory: 128Gi``), and the printed form is itself a valid file meaning the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from builders import EXAMPLES
from hetsched.cli.check import with_units
from hetsched.cli.main import app


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"cpu": 16000, "memory": 131072}, {"cpu": 16, "memory": "128Gi"}),
        ({"cpu": 500, "memory": 1536}, {"cpu": "500m", "memory": "1536Mi"}),
        ({"jobs": [{"resources": {"cpu": 2000}}]}, {"jobs": [{"resources": {"cpu": 2}}]}),
        ({"cpu": True, "memory": "8Gi"}, {"cpu": True, "memory": "8Gi"}),
        ({"attributes": {"memory_gib": 80}}, {"attributes": {"memory_gib": 80}}),
    ],
)
def test_quantities_read_as_written(document: dict[str, Any], expected: dict[str, Any]) -> None:
    assert with_units(document) == expected


def _check(*args: str) -> str:
    result = CliRunner().invoke(app, ["check", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("name", ["clusters/demo.yaml", "clusters/mixed.yaml", "jobs/mixed.yaml"])
def test_the_printed_form_is_a_valid_file_with_the_same_meaning(name: str, tmp_path: Path) -> None:
    path = Path(EXAMPLES) / name
    printed = _check(str(path))
    assert "cpu: 16000" not in printed and "memory: 131072" not in printed
    again = tmp_path / "printed.yaml"
    again.write_text(printed.split("\n", 1)[1])  # after the "valid" line
    first = json.loads(_check(str(path), "-o", "json"))["normalized"]
    assert json.loads(_check(str(again), "-o", "json"))["normalized"] == first


def test_the_demo_cluster_reads_in_cores_and_gibibytes() -> None:
    printed = _check(str(Path(EXAMPLES) / "clusters" / "demo.yaml"))
    assert "  cpu: 16\n  memory: 128Gi\n" in printed
