"""One exit code for invalid input: ``check`` and ``submit`` both exit 2 for a file that
cannot be read, is not YAML or holds no jobs, and both name the file and, for YAML, the line
and column (not PyYAML's ``in "<byte string>"``). ``submit`` refuses such a file before it
sends anything (the URL below answers nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetsched.cli.main import app

NOWHERE = {"HETSCHED_URL": "http://127.0.0.1:9", "HETSCHED_TOKEN": "hs_unused"}


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env=NOWHERE)
    return result.exit_code, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("content", "said"),
    [
        # the flow mapping opened on line 3 is still open where line 4 starts
        ("jobs:\n  - name: a\n    resources: {cpu: 1\n", "line 4, column 1: not valid YAML"),
        # a key indented 3 spaces under a list item indented 2: line 3, column 4
        ("jobs:\n  - name: a\n   x: 1\n", "line 3, column 4: not valid YAML"),
        ("- just\n- a list\n", "expected a "),
        (None, "cannot read"),
    ],
    ids=["unclosed", "indent", "list", "missing"],
)
@pytest.mark.parametrize("command", ["check", "submit"])
def test_check_and_submit_refuse_a_bad_file_alike(
    tmp_path: Path, command: str, content: str | None, said: str
) -> None:
    path = tmp_path / "jobs.yaml"
    if content is not None:
        path.write_text(content)
    code, out = _run(command, str(path))
    assert code == 2, out
    assert f"{path}: {said}" in out, out
    assert "<byte string>" not in out and "cannot reach" not in out, out


def test_a_usage_error_after_a_jobs_file_is_invalid_input(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text('{"name": "j", "command": ["true"]}')
    code, out = _run("submit", str(path), "--queue", "q")
    assert code == 2 and "after a jobs file only -o/--output may follow" in out, out
