"""``hetsched history export`` and ``hetsched sim replay --history``: bad input exits 2
with the field and what was expected, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from hetsched.cli.main import app

runner = CliRunner()


def test_export_without_a_store_names_the_home(tmp_path: Path) -> None:
    target = tmp_path / "h.json"
    result = runner.invoke(app, ["history", "export", str(target), "--home", str(tmp_path)])
    assert result.exit_code == 2
    assert f"--home: no store at {tmp_path / 'hetsched.db'}" in result.output
    assert not target.exists()


def test_a_history_of_another_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"format": "hetsched-history", "version": 7}))
    result = runner.invoke(app, ["sim", "replay", "--history", str(path)])
    assert result.exit_code == 2
    assert "version: this hetsched reads hetsched-history version 1, the file is version 7" in (
        " ".join(result.output.split())
    )


def test_history_goes_without_cluster_and_workload(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text("{}")
    result = runner.invoke(app, ["sim", "replay", "--history", str(path), "--cluster", str(path)])
    assert result.exit_code == 2 and "--history: not with --cluster" in result.output
    result = runner.invoke(app, ["sim", "replay", "--workload", str(path)])
    assert result.exit_code == 2
    assert "--cluster and --workload are required (or --history FILE)" in result.output


def test_export_help_says_where_it_reads_from() -> None:
    result = runner.invoke(app, ["history", "export", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.replace("│", " ").split())
    assert "Read from the store, so it works while the service is down" in text
