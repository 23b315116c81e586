"""``hetsched submit``'s arguments: a jobs file, or a command.

The command parses with interspersed options off (a command's own flags are its own), so
options written after a jobs file reach ``submit`` as arguments: a first argument that names
an existing YAML or JSON file is the jobs file whatever follows it, and only ``-o`` /
``--output`` may follow it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetsched.cli.jobs import ListFormat
from hetsched.cli.main import app
from hetsched.cli.submit import jobs_file, trailing_output


@pytest.mark.parametrize(
    ("items", "is_file"),
    [
        # an existing file with a jobs file's suffix, whatever follows
        (["jobs.json"], True),
        (["jobs.json", "-o", "json"], True),
        (["jobs.yaml", "--output", "wide"], True),
        (["jobs.yml", "-ojson"], True),
        # alone, a jobs file's name is a file even when missing (the read reports it)
        (["missing.yaml"], True),
        # a missing file followed by words is a command
        (["missing.yaml", "--flag"], False),
        # not a jobs file's suffix: a command, whatever follows
        (["python", "train.py", "-o", "json"], False),
        (["notes.txt"], False),
        ([], False),
    ],
)
def test_which_first_argument_is_a_jobs_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, items: list[str], is_file: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("jobs.json", "jobs.yaml", "jobs.yml", "notes.txt"):
        (tmp_path / name).write_text("{}")
    assert (jobs_file(items) is not None) is is_file


@pytest.mark.parametrize(
    ("rest", "expected"),
    [
        ([], ListFormat.table),
        (["-o", "json"], ListFormat.json),
        (["--output", "wide"], ListFormat.wide),
        (["--output=json"], ListFormat.json),
        (["-ojson"], ListFormat.json),
        # the last one wins, as click's own parsing does
        (["-o", "json", "-o", "table"], ListFormat.table),
    ],
)
def test_the_output_options_after_a_jobs_file(rest: list[str], expected: ListFormat) -> None:
    assert trailing_output(rest, ListFormat.table) is expected


@pytest.mark.parametrize(
    ("rest", "message"),
    [
        (["-o"], "-o: needs a value"),
        (["-o", "yaml"], "'yaml' is not one of table, wide, json"),
        (["--queue", "q"], "--queue: after a jobs file only -o/--output may follow"),
        (["extra"], "extra: after a jobs file only -o/--output may follow"),
    ],
)
def test_anything_else_after_a_jobs_file_is_refused(
    tmp_path: Path, rest: list[str], message: str
) -> None:
    path = tmp_path / "jobs.json"
    path.write_text('{"name": "j", "command": ["true"]}')
    # refused before any request: no service is needed to see the message
    env = {"HETSCHED_URL": "http://127.0.0.1:9"}
    result = CliRunner().invoke(app, ["submit", str(path), *rest], env=env)
    assert result.exit_code == 2  # invalid input (click's code for a usage error too)
    assert message in result.stdout + result.stderr
